#include "common/run_metrics.h"

#include <filesystem>

#include "common/line_reader.h"
#include "common/logging.h"
#include "common/metrics_parser.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// Each key's last step in an existing metrics.jsonl (empty if there is none). Lines that are no
// metrics line are left out with a warning: they hold no step this run logged.
std::map<std::string, int64_t> LastSteps(const std::string& path) {
  std::map<std::string, int64_t> last;
  LineReader reader(path);
  for (std::string line; reader.Next(&line);) {
    auto parsed = ParseMetricsLine(line);
    if (!parsed.ok()) {
      PSF_LOG(Warning) << path << ":" << reader.number() << ": " << parsed.status().message() << "; line skipped";
      continue;
    }
    const std::optional<int64_t> step = StepOf(parsed->numbers);
    if (!step) continue;
    for (const std::string& key : parsed->keys) {
      int64_t& s = last.emplace(key, *step).first->second;
      s = std::max(s, *step);
    }
  }
  for (const std::string& problem : reader.too_long()) PSF_LOG(Warning) << problem;
  if (!reader.status().ok()) PSF_LOG(Warning) << reader.status().message();
  return last;
}

}  // namespace

std::string TensorBoardTag(const std::string& key) {
  if (key.rfind("valid_", 0) == 0) return "valid/" + key.substr(6);
  if (key == "compute_s" || key == "push_s" || key == "wait_s" || key == "pull_s" || key == "device_s" ||
      key == "launch_cpu_s") {
    return "step_time/" + key;
  }
  return "train/" + key;
}

StatusOr<std::unique_ptr<RunMetrics>> RunMetrics::Open(const std::string& run_dir, bool tensorboard) {
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  std::map<std::string, int64_t> last_steps = LastSteps(path);
  PSF_ASSIGN_OR_RETURN(std::unique_ptr<MetricsLog> log, MetricsLog::Open(path));
  std::unique_ptr<tensorboard::EventWriter> events;
  if (tensorboard) {
    PSF_ASSIGN_OR_RETURN(events, tensorboard::EventWriter::Open((fs::path(run_dir) / "tensorboard").string()));
  }
  return std::unique_ptr<RunMetrics>(new RunMetrics(std::move(log), std::move(events), std::move(last_steps)));
}

Status RunMetrics::Write(const MetricsLine& line) {
  int64_t step = -1;
  for (const auto& [key, value] : line.numbers()) {
    if (key == "step") step = static_cast<int64_t>(value);
  }
  PSF_CHECK(step >= 0);  // every metrics line has a step
  bool fresh = false;
  std::vector<std::pair<std::string, double>> scalars;
  for (const auto& [key, value] : line.numbers()) {
    // "steps" says how many steps a train line covers: not a figure of its own, and not what
    // makes a line new (lines written before it existed lack it).
    if (key == "step" || key == "steps") continue;
    auto it = last_steps_.find(key);
    if (it == last_steps_.end() || it->second < step) fresh = true;
    scalars.emplace_back(TensorBoardTag(key), value);
  }
  if (!fresh) return Status::Ok();
  for (const auto& [key, value] : line.numbers()) last_steps_[key] = step;
  PSF_RETURN_IF_ERROR(log_->Write(line));
  return events_ ? events_->AddScalars(step, scalars) : Status::Ok();
}

Status RunMetrics::Note(int64_t step, const std::string& text) {
  return events_ ? events_->AddText("events", step, text) : Status::Ok();
}

}  // namespace psformer
