#include "common/descriptor_limit.h"

#include <sys/resource.h>

namespace tessera {

void RaiseDescriptorLimit() {
  static const bool raised = [] {
    struct rlimit limit {};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return false;
    limit.rlim_cur = limit.rlim_max;
    return setrlimit(RLIMIT_NOFILE, &limit) == 0;
  }();
  (void)raised;
}

}  // namespace tessera
