#include "common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iterator>

#include "common/clock_text.h"
#include "common/enum_name.h"
#include "common/thread_annotations.h"

namespace psformer {
namespace {

struct LogState {
  Mutex mu;
  std::string tag PSF_GUARDED_BY(mu) = "psformer";
  FILE* file PSF_GUARDED_BY(mu) = nullptr;
  bool to_stderr PSF_GUARDED_BY(mu) = true;
};

LogState& State() {
  static LogState* state = new LogState();  // never destroyed: logging works during exit.
  return *state;
}

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelLetter(LogLevel level) {
  static constexpr const char* kLetters[] = {"D", "I", "W", "E"};
  static_assert(std::size(kLetters) == static_cast<size_t>(LogLevel::kError) + 1, "a letter for every level");
  return EnumName(level, kLetters, "?");
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void SetLogTag(const std::string& tag) {
  LogState& s = State();
  MutexLock lock(&s.mu);
  s.tag = tag;
}

void SetLogToStderr(bool on) {
  LogState& s = State();
  MutexLock lock(&s.mu);
  s.to_stderr = on;
}

Status SetLogFile(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return Status::IoError("cannot open log file " + path);
  LogState& s = State();
  MutexLock lock(&s.mu);
  if (s.file != nullptr) std::fclose(s.file);
  s.file = f;
  return Status::Ok();
}

void LogLine(LogLevel level, const char* file, int line, const std::string& message) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  const std::string stamp = ClockText(tv.tv_sec, "%Y-%m-%d %H:%M:%S", TimeZone::kLocal);
  const char* base = file;
  for (const char* c = file; *c; ++c) {
    if (*c == '/') base = c + 1;
  }
  LogState& s = State();
  MutexLock lock(&s.mu);
  char prefix[160];
  std::snprintf(prefix, sizeof(prefix), "%s %s.%03d %s %s:%d] ", LevelLetter(level), stamp.c_str(),
                static_cast<int>(tv.tv_usec / 1000), s.tag.c_str(), base, line);
  if (s.to_stderr) {
    std::fprintf(stderr, "%s%s\n", prefix, message.c_str());
    std::fflush(stderr);
  }
  if (s.file != nullptr) {
    std::fprintf(s.file, "%s%s\n", prefix, message.c_str());
    std::fflush(s.file);
  }
}

namespace internal {
void CheckFailed(const char* condition, const char* file, int line) {
  LogLine(LogLevel::kError, file, line, std::string("check failed: ") + condition);
  std::abort();
}
}  // namespace internal

}  // namespace psformer
