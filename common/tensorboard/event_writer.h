// Writes TensorBoard event files: `tensorboard --logdir RUN_DIR/tensorboard` shows them.
//
// Each writer makes a file of its own, events.out.tfevents.<unix seconds>.<host>.<pid>, and flushes
// every event as it is added, so a reader sees the run as it goes and a killed writer loses at most
// the record it was writing (TensorBoard reads a file up to its last whole record).
//
// No step twice: on opening, the writer reads the event files already in the directory and
// remembers each scalar tag's last step; a scalar at that step or before is not written again. So
// a restarted process, or a resumed run that recomputes steps since its checkpoint, continues the
// curves instead of drawing them twice.
//
// Not thread-safe: one thread writes.
#ifndef PSFORMER_COMMON_TENSORBOARD_EVENT_WRITER_H_
#define PSFORMER_COMMON_TENSORBOARD_EVENT_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace psformer::tensorboard {

class EventWriter {
 public:
  // Creates `dir` if missing and a new event file in it. IoError if either cannot be made; files
  // already there that cannot be read are skipped with a log line.
  static StatusOr<std::unique_ptr<EventWriter>> Open(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event holding each (tag, value) whose tag has no scalar at `step` or later yet.
  Status AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  Status AddScalar(const std::string& tag, int64_t step, double value) { return AddScalars(step, {{tag, value}}); }
  // A text event (TensorBoard's Text tab), e.g. a restart or a rollback. Always written.
  Status AddText(const std::string& tag, int64_t step, const std::string& text);

  // The last step of `tag` in this directory, this writer's events included; -1 if none.
  int64_t LastStep(const std::string& tag) const;
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::FILE* file, std::string path, std::map<std::string, int64_t> last_steps)
      : file_(file), path_(std::move(path)), last_steps_(std::move(last_steps)) {}
  Status WriteEvent(const std::string& serialized);

  std::FILE* file_;
  std::string path_;
  std::map<std::string, int64_t> last_steps_;  // scalar tag -> its last step
};

}  // namespace psformer::tensorboard

#endif  // PSFORMER_COMMON_TENSORBOARD_EVENT_WRITER_H_
