// SupervisorEvents: what a supervisor knows of the job that the coordinator does not (a role
// process died and is restarted), as TensorBoard text events (tag "events") in
// RUN_DIR/tensorboard/, beside the coordinator's scalars and its own notes of rollbacks.
//
// A supervisor does not follow the training step: each note goes at the newest step of
// RUN_DIR/metrics.jsonl (0 before the first line), where the curves stood when it happened.
// The event file is made at the first note, so a job without restarts leaves none.
//
// Failures to write are warnings in the supervisor's log: the job goes on without the note.
// Not thread-safe: the supervising thread uses it.
#ifndef PSFORMER_LAUNCHER_SUPERVISOR_EVENTS_H_
#define PSFORMER_LAUNCHER_SUPERVISOR_EVENTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "common/tensorboard/event_writer.h"

namespace psformer {

class SupervisorEvents {
 public:
  // `enabled`: logging.tensorboard; when false, Note does nothing.
  SupervisorEvents(std::string run_dir, bool enabled) : run_dir_(std::move(run_dir)), enabled_(enabled) {}

  void Note(const std::string& text);

 private:
  std::string run_dir_;
  bool enabled_;
  std::unique_ptr<tensorboard::EventWriter> writer_;  // opened at the first note
};

// The largest "step" of RUN_DIR/metrics.jsonl; 0 if it has none or cannot be read.
int64_t LastLoggedStep(const std::string& run_dir);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_SUPERVISOR_EVENTS_H_
