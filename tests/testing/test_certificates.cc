#include "tests/testing/test_certificates.h"

#include <sys/wait.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::testing {

absl::Status MakeTestCertificates(const std::string& dir,
                                  const std::vector<std::string>& subject_alt_names) {
  const std::string script = absl::StrCat(
      "set -e; mkdir -p ", dir, "; cd ", dir, "; ",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=tessera-test-ca 2>/dev/null; ",
      "openssl req -newkey rsa:2048 -nodes -keyout worker.key -out worker.csr "
      "-subj /CN=tessera-worker 2>/dev/null; ",
      "printf 'subjectAltName=", absl::StrJoin(subject_alt_names, ","),
      "\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext.cnf; ",
      "openssl x509 -req -in worker.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out worker.pem -days 2 -extfile ext.cnf 2>/dev/null");
  const int status = std::system(script.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("openssl failed making test certificates in " + dir);
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> MutualTlsEnv(const std::string& dir) {
  return {{"TESSERA_TLS_CERT_FILE", dir + "/worker.pem"},
          {"TESSERA_TLS_KEY_FILE", dir + "/worker.key"},
          {"TESSERA_TLS_CA_FILE", dir + "/ca.pem"},
          {"TESSERA_TLS_MUTUAL", "1"}};
}

}  // namespace tessera::testing
