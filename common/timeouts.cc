#include "common/timeouts.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "common/logging.h"

namespace tessera {

absl::Duration DefaultTimeout() {
  const char* text = std::getenv("TESSERA_TIMEOUT_S");
  if (text == nullptr) return kBuiltinDefaultTimeout;
  double seconds = 0;
  if (!absl::SimpleAtod(text, &seconds) || !(seconds > 0)) {
    TESSERA_LOG(WARNING) << "TESSERA_TIMEOUT_S='" << text
                         << "' is not a positive number of seconds; using "
                         << absl::FormatDuration(kBuiltinDefaultTimeout);
    return kBuiltinDefaultTimeout;
  }
  return absl::Seconds(seconds);
}

}  // namespace tessera
