#include "auth/mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>

namespace tessera::auth {

std::string Mac(const JobSecret& secret, std::initializer_list<std::string_view> fields) {
  std::string data;
  for (std::string_view field : fields) {
    const uint32_t size = static_cast<uint32_t>(field.size());
    for (int shift = 0; shift < 32; shift += 8) data.push_back(static_cast<char>(size >> shift));
    data.append(field);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.value().data(), static_cast<int>(secret.value().size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool SameMac(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tessera::auth
