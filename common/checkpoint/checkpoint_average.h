// Checkpoint averaging (the paper's "average of the last 5 checkpoints"): the parameters of the
// newest N complete checkpoints of a run, averaged element by element into one flat vector.
// Checkpoints that do not verify (no manifest, a shard file missing, truncated or with the wrong
// CRC-32C) are skipped with a log line, as the loader skips them, and older ones are taken
// instead. Only parameters are averaged; Adam's moments are read with them but not used.
#ifndef PSFORMER_COMMON_CHECKPOINT_CHECKPOINT_AVERAGE_H_
#define PSFORMER_COMMON_CHECKPOINT_CHECKPOINT_AVERAGE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_store.h"
#include "common/status.h"

namespace psformer {

// The steps of the newest `last` checkpoints of `run_dir` that verify against `id`, oldest
// first; fewer (possibly none) when the run has fewer. Each newer checkpoint that does not verify
// is skipped with a warning saying why. InvalidArgument when a checkpoint was written for another
// model config (the run's config does not describe its checkpoints). REQUIRES: last >= 1.
StatusOr<std::vector<int64_t>> NewestCompleteCheckpoints(const std::string& run_dir, const CheckpointIdentity& id,
                                                         int last);

// The element-wise mean of the parameters of checkpoints `steps`, shard after shard: in the
// servers' order, which is the model's unless the job spread its layers (PieceTable::ToModelOrder
// turns one into the other). The sum runs in double,
// checkpoint by checkpoint in the order given, and is divided once, so the result depends only
// on the checkpoints' contents (averaging one checkpoint gives its parameters bit for bit).
// Corruption/IoError when a shard file cannot be read or does not hold what its name says.
// `read(done)` (if set) is called after each checkpoint is read, with how many are: for progress.
// REQUIRES: steps is not empty.
StatusOr<std::vector<float>> AverageCheckpoints(const std::string& run_dir, const CheckpointIdentity& id,
                                                const std::vector<int64_t>& steps,
                                                const std::function<void(size_t done)>& read = nullptr);

// The steps averaged (oldest first) and their parameters' mean.
struct CheckpointAverage {
  std::vector<int64_t> steps;
  std::vector<float> params;
};

// How often AverageNewestCheckpoints chooses again when the run's checkpoints change under it.
inline constexpr int kAverageAttempts = 5;

// NewestCompleteCheckpoints, then AverageCheckpoints of them, for a run that may still be
// training: where that fails (or `chosen` refuses the steps) and the run's list of checkpoints
// changed meanwhile (its job wrote a newer one, and its retention, checkpoint.keep_last, removed
// one of those chosen), the newest are chosen and read again, at most kAverageAttempts times in
// all, each time after `again(reason)` (if set). `chosen(steps)` sees the steps before they are
// read (none when the run has none) and may refuse them with an error, returned as it is.
StatusOr<CheckpointAverage> AverageNewestCheckpoints(
    const std::string& run_dir, const CheckpointIdentity& id, int last,
    const std::function<Status(const std::vector<int64_t>& steps)>& chosen,
    const std::function<void(size_t done)>& read = nullptr,
    const std::function<void(const std::string& reason)>& again = nullptr);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CHECKPOINT_CHECKPOINT_AVERAGE_H_
