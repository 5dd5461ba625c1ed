// What a training run reports as it goes: each MetricsLine becomes a line of RUN_DIR/metrics.jsonl
// (common/metrics_log.h) and, unless logging.tensorboard is off, the same numbers as TensorBoard
// scalars in RUN_DIR/tensorboard/ (common/tensorboard/event_writer.h), at the line's "step", under
// the tags of TensorBoardTag.
//
// A step is reported once: a line whose every field already has a value at that step or a later
// one in metrics.jsonl is left out, so a restarted coordinator or a resumed run that recomputes
// the steps since its checkpoint does not repeat them.
#ifndef PSFORMER_COMMON_RUN_METRICS_H_
#define PSFORMER_COMMON_RUN_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/metrics_log.h"
#include "common/status.h"
#include "common/tensorboard/event_writer.h"

namespace psformer {

// The TensorBoard tag of a metrics.jsonl key: valid_X -> valid/X; the step time split
// (compute_s, push_s, wait_s, pull_s, device_s, launch_cpu_s) -> step_time/KEY; anything else ->
// train/KEY.
std::string TensorBoardTag(const std::string& key);

class RunMetrics {
 public:
  // Opens RUN_DIR/metrics.jsonl for appending and, if `tensorboard`, an event file in
  // RUN_DIR/tensorboard/. IoError if either cannot be opened.
  static StatusOr<std::unique_ptr<RunMetrics>> Open(const std::string& run_dir, bool tensorboard);

  // REQUIRES: the line has an integer "step" field.
  Status Write(const MetricsLine& line);
  // A text event in TensorBoard (tag "events"): a restart, a rollback, early stopping.
  Status Note(int64_t step, const std::string& text);

 private:
  RunMetrics(std::unique_ptr<MetricsLog> log, std::unique_ptr<tensorboard::EventWriter> events,
             std::map<std::string, int64_t> last_steps)
      : log_(std::move(log)), events_(std::move(events)), last_steps_(std::move(last_steps)) {}

  std::unique_ptr<MetricsLog> log_;
  std::unique_ptr<tensorboard::EventWriter> events_;  // null when TensorBoard is off
  std::map<std::string, int64_t> last_steps_;         // metrics.jsonl key -> its last step
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_RUN_METRICS_H_
