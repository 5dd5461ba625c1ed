// Logging with levels and timestamps. Each role process logs to stderr and, once
// SetLogFile() is called, to its own file under the run directory's logs/.
// Thread-safe: a line is written whole.
#ifndef PSFORMER_COMMON_LOGGING_H_
#define PSFORMER_COMMON_LOGGING_H_

#include <sstream>
#include <string>

#include "common/status.h"

namespace psformer {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
// The tag names the process in every line, e.g. "worker-1" or "pserver-0".
void SetLogTag(const std::string& tag);
// Also append every line to `path` (created with its parent directories).
Status SetLogFile(const std::string& path);
// Whether lines also go to stderr (default true).
void SetLogToStderr(bool on);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const char* file, int line, const std::string& message);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  ~LogMessage() { LogLine(level_, file_, line_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// Turns the streamed expression into void so both arms of PSF_LOG's ?: agree.
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal

}  // namespace psformer

// An expression, so it is safe inside an unbraced if/else; the stream is not evaluated when
// the level is off.
#define PSF_LOG(level)                                    \
  !::psformer::LogEnabled(::psformer::LogLevel::k##level) \
      ? (void)0                                           \
      : ::psformer::internal::LogVoidify() &              \
            ::psformer::internal::LogMessage(::psformer::LogLevel::k##level, __FILE__, __LINE__).stream()

// The same with the level chosen at run time (a LogLevel value).
#define PSF_LOG_AT(level_value)              \
  !::psformer::LogEnabled(level_value)       \
      ? (void)0                              \
      : ::psformer::internal::LogVoidify() & \
            ::psformer::internal::LogMessage(level_value, __FILE__, __LINE__).stream()

// Invariant check that survives release builds: names file and line, then aborts.
// For programming errors only; user mistakes get a Status.
#define PSF_CHECK(cond)                                                        \
  do {                                                                         \
    if (!(cond)) ::psformer::internal::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace psformer::internal {
[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);
}

#endif  // PSFORMER_COMMON_LOGGING_H_
