// The third-party headers most of the library's files include, precompiled
// once by scripts/check_thread_safety.sh and loaded by each clang run
// (-include-pch): parsing LibTorch's, Abseil's and Protobuf's headers is most
// of a run's time (151 s -> 110 s for the check on 2 cores). Only headers
// that most files reach: a larger set (torch/nn, gRPC, TensorPipe) made the
// check slower, not faster, because every run pays for loading it.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>
#include <google/protobuf/message.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
