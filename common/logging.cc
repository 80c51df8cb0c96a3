#include "common/logging.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tessera {
namespace {

LogLevel ThresholdFromEnv() {
  const char* env = std::getenv("TESSERA_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kWarning;
  if (std::strcmp(env, "DEBUG") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "INFO") == 0) return LogLevel::kInfo;
  if (std::strcmp(env, "ERROR") == 0) return LogLevel::kError;
  return LogLevel::kWarning;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = ThresholdFromEnv();
  return level >= threshold;
}

LogLine::LogLine(LogLevel level, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  stream_ << "[tessera " << LevelName(level) << " " << getpid() << " "
          << (base ? base + 1 : file) << ":" << line << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write per line; a short write on stderr is not worth retrying.
  [[maybe_unused]] ssize_t n = ::write(2, text.data(), text.size());
}

}  // namespace tessera
