// A one-line progress meter for long commands: "translate: 340/1110 sentences (31%)  33 sentences/s
// ETA 23s", redrawn in place on stderr. Only when stderr is a terminal: nothing of it reaches a log
// file or a pipe.
#ifndef PSFORMER_LAUNCHER_TERMINAL_PROGRESS_H_
#define PSFORMER_LAUNCHER_TERMINAL_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace psformer {

class TerminalProgress {
 public:
  // `what`: the command ("translate"); `unit`: what is counted, plural ("sentences").
  TerminalProgress(std::string what, int64_t total, std::string unit);
  ~TerminalProgress() { Finish(); }
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;

  // `done` of the total are done; redraws at most five times a second, and at the end.
  void Update(int64_t done);
  // Clears the line (idempotent).
  void Finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now(), last_draw_;
};

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_TERMINAL_PROGRESS_H_
