#include "launcher/supervisor_events.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/logging.h"

namespace psformer {

namespace fs = std::filesystem;

int64_t LastLoggedStep(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  static const std::regex kStep("\"step\": ([0-9]+)");
  int64_t last = 0;
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kStep)) last = std::max<int64_t>(last, std::stoll(m[1].str()));
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
