#include "launcher/supervisor_events.h"

#include <algorithm>
#include <filesystem>

#include "common/line_reader.h"
#include "common/logging.h"
#include "common/metrics_parser.h"

namespace psformer {

namespace fs = std::filesystem;

int64_t LastLoggedStep(const std::string& run_dir) {
  // Lines that are no metrics line hold no step; the worker's log names them.
  LineReader reader((fs::path(run_dir) / "metrics.jsonl").string());
  int64_t last = 0;
  for (std::string line; reader.Next(&line);) {
    auto parsed = ParseMetricsLine(line);
    if (!parsed.ok()) continue;
    if (const std::optional<int64_t> step = StepOf(parsed->numbers)) last = std::max(last, *step);
  }
  return last;
}

void SupervisorEvents::Note(const std::string& text) {
  if (!enabled_) return;
  if (!writer_) {
    auto opened = tensorboard::EventWriter::Open((fs::path(run_dir_) / "tensorboard").string());
    if (!opened.ok()) {
      PSF_LOG(Warning) << "cannot note \"" << text << "\" in TensorBoard: " << opened.status().message();
      return;
    }
    writer_ = std::move(*opened);
  }
  const Status written = writer_->AddText("events", LastLoggedStep(run_dir_), text);
  if (!written.ok()) PSF_LOG(Warning) << "cannot note \"" << text << "\" in TensorBoard: " << written.message();
}

}  // namespace psformer
