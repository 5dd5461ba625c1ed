// Trace: a timeline of what each thread of a role process did during a few chosen steps, to see
// where a step's time goes (docs/tracing.md). Asked for with the environment variable
//   PSFORMER_TRACE_STEPS=FROM:COUNT      e.g. PSFORMER_TRACE_STEPS=20:5 psformer train ...
// which every role inherits: each writes RUN_DIR/trace/ROLE.json, Chrome's trace-event format,
// once it is past the window (or when it ends). Timestamps are CLOCK_MONOTONIC microseconds,
// which every process of one machine shares, so the files of one host merge into one timeline
// (scripts/trace-summary --merge) in which a worker's pieces line up with the servers' updates.
//
// A process records while its current step (AtStep: a worker's step, a server's newest pushed
// step) is inside [FROM, FROM + COUNT). Off, a trace point costs one relaxed atomic load.
//
// Thread safety: everything may be called from any thread.
#ifndef PSFORMER_COMMON_TRACE_H_
#define PSFORMER_COMMON_TRACE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace psformer {

// The variable that asks for a trace.
inline constexpr char kTraceStepsVariable[] = "PSFORMER_TRACE_STEPS";

struct TraceWindow {
  int64_t first_step = 0;
  int64_t steps = 0;  // 0: no trace
};

// PSFORMER_TRACE_STEPS's value ("FROM:COUNT", FROM >= 1, COUNT >= 1), or InvalidArgument saying
// what is wrong with it. Unset or empty: no trace.
StatusOr<TraceWindow> TraceWindowFromEnvironment();

class Trace {
 public:
  // Records the window's steps for the process named `process` (worker-0, pserver-1) into
  // `path`. Once per process; a window of 0 steps records nothing.
  static void Configure(const std::string& path, const std::string& process, TraceWindow window);
  // Configure for the role `process` of the run in `run_dir`, from PSFORMER_TRACE_STEPS: its
  // file is RUN_DIR/trace/PROCESS.json. InvalidArgument for a malformed value.
  static Status ConfigureFromEnvironment(const std::string& run_dir, const std::string& process);
  // The step the process works on now: recording is on inside the window, and the first step
  // past it writes the file.
  static void AtStep(int64_t step);
  // Writes what was recorded, if the window was entered and not yet written (a job shorter than
  // it, or a role ending early).
  static Status Finish();

  static bool on() { return on_.load(std::memory_order_relaxed); }
  static int64_t NowMicros();
  // One span of `name` (a string literal) on the calling thread, with two numbers to show.
  static void Span(const char* name, int64_t begin_us, int64_t end_us, int64_t a, int64_t b);
  // The same on a lane of its own, shown as `lane_name` (a string literal) beside the threads: for
  // a device's work, whose times the caller places on the host's clock. Lanes are numbered from 0
  // by the caller.
  static void LaneSpan(int lane, const char* lane_name, const char* name, int64_t begin_us, int64_t end_us, int64_t a,
                       int64_t b);

 private:
  static std::atomic<bool> on_;
};

// The span of its own lifetime, when recording: TraceSpan span("send_part", type, begin);
class TraceSpan {
 public:
  explicit TraceSpan(const char* name, int64_t a = -1, int64_t b = -1)
      : name_(Trace::on() ? name : nullptr), a_(a), b_(b), begin_(name_ != nullptr ? Trace::NowMicros() : 0) {}
  ~TraceSpan() {
    if (name_ != nullptr) Trace::Span(name_, begin_, Trace::NowMicros(), a_, b_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const char* name_;
  int64_t a_, b_;
  int64_t begin_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRACE_H_
