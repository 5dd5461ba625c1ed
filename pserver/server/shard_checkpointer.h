// ShardCheckpointer: one shard's checkpoints in RUN_DIR/checkpoints (common/checkpoint/), with the
// job's CheckpointIdentity built once, so that every load, write and check of this shard agrees
// on what a checkpoint of this job is (shard count, parameter count, model digest).
//
// Thread safety: one thread (the server loop).
#ifndef PSFORMER_PSERVER_SERVER_SHARD_CHECKPOINTER_H_
#define PSFORMER_PSERVER_SERVER_SHARD_CHECKPOINTER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_store.h"
#include "common/param_layout.h"
#include "common/status.h"
#include "pserver/server/shard_optimizer.h"

namespace psformer {

// What a checkpoint of the job with `config` and vocabulary `vocab` is: shard and parameter
// counts, model digest, and whether its shards hold spread layers (JobPieceTable).
CheckpointIdentity JobCheckpointIdentity(const proto::JobConfig& config, int vocab);

class ShardCheckpointer {
 public:
  // `run_dir` empty: no checkpoints (enabled() is false; every load and write fails).
  ShardCheckpointer(std::string run_dir, CheckpointIdentity identity, int shard, int keep_last);

  bool enabled() const { return !run_dir_.empty(); }

  // The newest complete checkpoint's shard (nullopt: none), skipping broken ones with a log line.
  StatusOr<std::optional<ShardCheckpoint>> LoadNewest() const;
  // The shard of checkpoint `step`, which must be complete and intact.
  StatusOr<ShardCheckpoint> Load(int64_t step) const;
  // Whether checkpoint `step` is complete and intact already.
  bool Complete(int64_t step) const;
  // Writes this shard's file of checkpoint `step` (and the manifest when it completes the
  // checkpoint), keeping checkpoint.keep_last. `midway` runs halfway through (fault injection).
  Status Write(int64_t step, const ShardOptimizer& optimizer, ShardRange range, std::vector<int64_t> worker_steps,
               std::function<void()> midway) const;

 private:
  std::string run_dir_;
  CheckpointIdentity identity_;
  int shard_;
  int keep_last_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_SHARD_CHECKPOINTER_H_
