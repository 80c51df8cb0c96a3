#include "common/grpc_logging.h"

#include <grpc/support/log.h>

#include <mutex>

#include "common/logging.h"

namespace tessera {
namespace {

void ToTesseraLog(gpr_log_func_args* args) {
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    TESSERA_LOG(INFO) << "grpc " << args->file << ":" << args->line << ": " << args->message;
  } else {
    TESSERA_LOG(DEBUG) << "grpc " << args->file << ":" << args->line << ": " << args->message;
  }
}

}  // namespace

void RouteGrpcLogging() {
  static std::once_flag once;
  // gRPC still filters by its own verbosity first (GRPC_VERBOSITY, ERROR
  // by default): what passes comes here.
  std::call_once(once, [] { gpr_set_log_function(ToTesseraLog); });
}

}  // namespace tessera
