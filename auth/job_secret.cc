#include "auth/job_secret.h"

#include <openssl/rand.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::auth {

absl::StatusOr<JobSecret> JobSecret::FromEnv() {
  const char* value = std::getenv("TESSERA_JOB_SECRET");
  const char* file = std::getenv("TESSERA_JOB_SECRET_FILE");
  if (value != nullptr && file != nullptr) {
    return absl::InvalidArgumentError(
        "both TESSERA_JOB_SECRET and TESSERA_JOB_SECRET_FILE are set; set one");
  }
  if (value != nullptr) return JobSecret(value);
  if (file == nullptr) return JobSecret();
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the job secret file '", file, "' (TESSERA_JOB_SECRET_FILE)"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  std::string secret = contents.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the job secret file '", file, "' is empty"));
  }
  return JobSecret(std::move(secret));
}

std::string RandomBytes(size_t bytes) {
  std::string out(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(bytes)) != 1) {
    // Without randomness the handshake proves nothing; never go on without it.
    throw StatusError(absl::InternalError("OpenSSL RAND_bytes failed"));
  }
  return out;
}

}  // namespace tessera::auth
