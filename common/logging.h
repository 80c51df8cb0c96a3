// Minimal leveled logging to stderr: TESSERA_LOG(INFO) << "...".
//
// The level comes from TESSERA_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR;
// default WARNING), read once. Each line is written with one write() so lines
// from several threads do not interleave.
#pragma once

#include <sstream>

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

bool LogEnabled(LogLevel level);

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace tessera

#define TESSERA_LOG_LEVEL_DEBUG ::tessera::LogLevel::kDebug
#define TESSERA_LOG_LEVEL_INFO ::tessera::LogLevel::kInfo
#define TESSERA_LOG_LEVEL_WARNING ::tessera::LogLevel::kWarning
#define TESSERA_LOG_LEVEL_ERROR ::tessera::LogLevel::kError

// A loop, not an if: the macro holds no `else`, so `if (c) TESSERA_LOG(INFO)
// << x; else ...` binds the else to the caller's if, and gcc's
// -Wdangling-else has nothing to warn about. The body runs at most once.
#define TESSERA_LOG(level)                                                        \
  for (bool tessera_log_once_ = ::tessera::LogEnabled(TESSERA_LOG_LEVEL_##level); \
       tessera_log_once_; tessera_log_once_ = false)                              \
  ::tessera::LogLine(TESSERA_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
