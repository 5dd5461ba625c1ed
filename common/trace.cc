#include "common/trace.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string_view>
#include <vector>

#include "common/json_text.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "common/write_file.h"

namespace psformer {
namespace {

// A process records at most this many spans (about 40 bytes each): a window of a few steps of
// the base model holds some thousands.
constexpr size_t kMaxSpans = 1 << 20;

struct SpanRecord {
  const char* name;
  int64_t begin_us, end_us, a, b;
  int tid;
};

struct State {
  Mutex mutex;
  std::string path PSF_GUARDED_BY(mutex);
  std::string process PSF_GUARDED_BY(mutex);
  TraceWindow window PSF_GUARDED_BY(mutex);
  bool entered PSF_GUARDED_BY(mutex) = false;  // the window was entered...
  bool written PSF_GUARDED_BY(mutex) = false;  // ...and its file written
  std::vector<SpanRecord> spans PSF_GUARDED_BY(mutex);
  std::map<int, std::string> thread_names PSF_GUARDED_BY(mutex);
  size_t dropped PSF_GUARDED_BY(mutex) = 0;
};

State& state() {
  static State* s = new State();  // never destroyed: threads may record while the process exits
  return *s;
}

int ThreadId() {
  thread_local const int tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
}

// Keeps `span`; a lane's spans are shown under `lane_name`, a thread's (lane_name null) under its
// name.
void Record(const SpanRecord& span, const char* lane_name) {
  State& s = state();
  MutexLock lock(&s.mutex);
  if (s.written) return;
  if (s.spans.size() >= kMaxSpans) {
    ++s.dropped;
    return;
  }
  s.spans.push_back(span);
  if (!s.thread_names.contains(span.tid)) {
    char thread_name[32] = "";
    if (lane_name == nullptr) pthread_getname_np(pthread_self(), thread_name, sizeof(thread_name));
    s.thread_names[span.tid] = lane_name != nullptr ? lane_name : thread_name;
  }
}

bool ParseCount(std::string_view text, int64_t* value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size() && *value >= 1;
}

// The file's text: spans as complete events ("X"), then the names of the process and threads.
std::string TraceJson(const State& s) PSF_REQUIRES(s.mutex) {
  const int pid = static_cast<int>(getpid());
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  const auto add = [&](const std::string& event) {
    if (!first) out += ",\n";
    first = false;
    out += event;
  };
  for (const SpanRecord& r : s.spans) {
    std::string e = "{\"name\": " + JsonQuote(r.name) + ", \"ph\": \"X\", \"pid\": " + std::to_string(pid) +
                    ", \"tid\": " + std::to_string(r.tid) + ", \"ts\": " + std::to_string(r.begin_us) +
                    ", \"dur\": " + std::to_string(r.end_us - r.begin_us) +
                    ", \"args\": {\"a\": " + std::to_string(r.a) + ", \"b\": " + std::to_string(r.b) + "}}";
    add(e);
  }
  add("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
      ", \"args\": {\"name\": " + JsonQuote(s.process) + "}}");
  for (const auto& [tid, name] : s.thread_names) {
    add("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
        ", \"tid\": " + std::to_string(tid) + ", \"args\": {\"name\": " + JsonQuote(name) + "}}");
  }
  out += "\n], \"otherData\": {\"process\": " + JsonQuote(s.process) +
         ", \"first_step\": " + std::to_string(s.window.first_step) + ", \"steps\": " + std::to_string(s.window.steps) +
         ", \"dropped_spans\": " + std::to_string(s.dropped) + "}}\n";
  return out;
}

Status WriteLocked(State& s) PSF_REQUIRES(s.mutex) {
  if (!s.entered || s.written) return Status::Ok();
  s.written = true;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(s.path).parent_path(), ec);
  if (ec) return Status::IoError("cannot create the directory of trace " + s.path + ": " + ec.message());
  return WriteFileAtomically(s.path, TraceJson(s));
}

}  // namespace

std::atomic<bool> Trace::on_{false};

StatusOr<TraceWindow> TraceWindowFromEnvironment() {
  const char* value = std::getenv(kTraceStepsVariable);
  if (value == nullptr || *value == '\0') return TraceWindow();
  const std::string_view text(value);
  const size_t colon = text.find(':');
  TraceWindow w;
  if (colon == std::string_view::npos || !ParseCount(text.substr(0, colon), &w.first_step) ||
      !ParseCount(text.substr(colon + 1), &w.steps)) {
    return Status::InvalidArgument(std::string(kTraceStepsVariable) + "=" + value +
                                   ": wants FROM:COUNT, two whole numbers >= 1 (e.g. 20:5 traces steps 20 to 24)");
  }
  return w;
}

void Trace::Configure(const std::string& path, const std::string& process, TraceWindow window) {
  State& s = state();
  MutexLock lock(&s.mutex);
  s.path = path;
  s.process = process;
  s.window = window;
  s.entered = s.written = false;
  s.spans.clear();
  s.thread_names.clear();
  s.dropped = 0;
  on_.store(false, std::memory_order_relaxed);
}

Status Trace::ConfigureFromEnvironment(const std::string& run_dir, const std::string& process) {
  PSF_ASSIGN_OR_RETURN(const TraceWindow window, TraceWindowFromEnvironment());
  Configure((std::filesystem::path(run_dir) / "trace" / (process + ".json")).string(), process, window);
  return Status::Ok();
}

void Trace::AtStep(int64_t step) {
  State& s = state();
  MutexLock lock(&s.mutex);
  if (s.window.steps == 0 || s.written) return;
  const bool inside = step >= s.window.first_step && step < s.window.first_step + s.window.steps;
  if (inside) s.entered = true;
  on_.store(inside, std::memory_order_relaxed);
  if (step >= s.window.first_step + s.window.steps) {
    const Status written = WriteLocked(s);
    if (!written.ok()) PSF_LOG(Warning) << "trace not written: " << written.message();
  }
}

Status Trace::Finish() {
  on_.store(false, std::memory_order_relaxed);
  State& s = state();
  MutexLock lock(&s.mutex);
  return WriteLocked(s);
}

int64_t Trace::NowMicros() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

void Trace::Span(const char* name, int64_t begin_us, int64_t end_us, int64_t a, int64_t b) {
  const int tid = ThreadId();
  Record({name, begin_us, end_us, a, b, tid}, nullptr);
}

void Trace::LaneSpan(int lane, const char* lane_name, const char* name, int64_t begin_us, int64_t end_us, int64_t a,
                     int64_t b) {
  const int tid = -1 - lane;  // thread ids are positive: a lane takes one no thread has
  Record({name, begin_us, end_us, a, b, tid}, lane_name);
}

}  // namespace psformer
