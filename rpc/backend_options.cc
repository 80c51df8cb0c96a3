#include "rpc/backend_options.h"

#include <cstdlib>

namespace tessera::rpc {

GrpcTlsOptions GrpcTlsOptions::FromEnv() {
  auto get = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  GrpcTlsOptions tls;
  tls.cert_chain_file = get("TESSERA_TLS_CERT_FILE");
  tls.private_key_file = get("TESSERA_TLS_KEY_FILE");
  tls.root_certs_file = get("TESSERA_TLS_CA_FILE");
  tls.mutual = get("TESSERA_TLS_MUTUAL") == "1";
  return tls;
}

}  // namespace tessera::rpc
