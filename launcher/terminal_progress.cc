#include "launcher/terminal_progress.h"

#include <unistd.h>

#include <cstdio>

#include "common/duration_text.h"

namespace psformer {

TerminalProgress::TerminalProgress(std::string what, int64_t total, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), enabled_(isatty(STDERR_FILENO) == 1) {}

void TerminalProgress::Update(int64_t done) {
  if (!enabled_ || total_ <= 0) return;
  const auto now = Clock::now();
  if (drawn_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  char line[200];
  int n = std::snprintf(line, sizeof(line), "%s: %lld/%lld %s (%.0f%%)  %.1f %s/s", what_.c_str(),
                        static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
                        100.0 * done / total_, rate, unit_.c_str());
  if (rate > 0 && done < total_ && n > 0 && n < static_cast<int>(sizeof(line))) {
    std::snprintf(line + n, sizeof(line) - n, "  ETA %s", DurationText((total_ - done) / rate).c_str());
  }
  // \r back to the start, \033[K clears what a longer line before left.
  std::fprintf(stderr, "\r%s\033[K", line);
  std::fflush(stderr);
  drawn_ = true;
}

void TerminalProgress::Finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace psformer
