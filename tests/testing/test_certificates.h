// TLS material for tests, made with openssl: a CA and one worker
// certificate (for client and server use) it signed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tessera::testing {

// Writes ca.pem, worker.pem and worker.key into `dir` (created if needed);
// the certificate names `subject_alt_names` ("IP:127.0.0.1", "DNS:host0").
absl::Status MakeTestCertificates(const std::string& dir,
                                  const std::vector<std::string>& subject_alt_names);

// The TESSERA_TLS_* settings for mutual TLS with those files.
std::vector<std::pair<std::string, std::string>> MutualTlsEnv(const std::string& dir);

}  // namespace tessera::testing
