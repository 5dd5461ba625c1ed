// Checkpoints of a run: RUN_DIR/checkpoints/step-NNNNNNNN/ holds one file per shard
// (shard-KKKK-of-SSSS.bin, see shard_file.h) and manifest.pbtxt (common/proto/checkpoint.proto).
// Every server writes its shard at the same steps; whichever server finds all shard files present
// after writing its own writes the manifest, so a checkpoint is complete exactly when its
// manifest exists. Loading verifies the manifest and every shard file's size and CRC-32C, and
// falls back to the previous checkpoint (with a log line) when one fails. All servers apply the
// same test to the same files, so they all choose the same step: a consistent cut.
#ifndef PSFORMER_COMMON_CHECKPOINT_CHECKPOINT_STORE_H_
#define PSFORMER_COMMON_CHECKPOINT_CHECKPOINT_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/checkpoint/shard_file.h"
#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

// What every checkpoint of a job must agree on.
struct CheckpointIdentity {
  int shards = 1;
  uint64_t parameter_count = 0;
  uint64_t config_digest = 0;  // ModelConfigDigest(config): a resume with another model is refused.
  // Shards hold each layer's parts (cluster.spread_layers) rather than contiguous ranges: the
  // same numbers mean other parameters, so a resume with the other layout is refused.
  bool spread_layers = false;
  // The host groups whose sums the servers added (HostGroups::sizes; empty = the flat path): they
  // fix the order of every sum, so a resume with another grouping is refused.
  std::vector<int> host_groups = {};
};

// A digest of the model config (with the vocabulary size it is built with).
uint64_t ModelConfigDigest(const proto::JobConfig& config, int vocab_size);

std::string CheckpointDir(const std::string& run_dir, int64_t step);  // .../checkpoints/step-NNNNNNNN
std::string ShardFileName(int shard, int shards);                     // shard-KKKK-of-SSSS.bin

// Whether `name` is a file SaveShardCheckpoint writes in a checkpoint directory: its manifest, a
// shard file, or one of them half-written (".tmp-PID").
bool IsCheckpointFileName(const std::string& name);

// Writes `shard` (its step names the checkpoint) into its checkpoint directory, then the manifest
// if every shard is now present, then removes complete checkpoints older than the newest
// `keep_last` (0 = keep all): their checkpoint files, and the directory once nothing else is in
// it (a file a user put there stays, with a warning).
Status SaveShardCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, const ShardCheckpointView& shard,
                           int keep_last);

// Writes step's manifest if all shard files exist (no-op otherwise). Returns whether it wrote.
StatusOr<bool> WriteManifestIfComplete(const std::string& run_dir, int64_t step, const CheckpointIdentity& id);

// Steps with a checkpoint directory, newest first (complete or not).
std::vector<int64_t> ListCheckpointSteps(const std::string& run_dir);

// OK if checkpoint `step` looks complete without reading it: the manifest parses and names this
// step, and every shard file it lists is there with the listed size (a truncated or missing shard
// is not). What `status`, the supervisors' restart advice and pruning go by; a resume verifies.
Status CheckCheckpointFiles(const std::string& run_dir, int64_t step);

// The step of the newest checkpoint that is complete (CheckCheckpointFiles); nullopt if none.
std::optional<int64_t> NewestCompleteCheckpointStep(const std::string& run_dir);

// OK if checkpoint `step` is complete and intact: the manifest parses and matches `id`, and
// every listed shard file has the listed size and CRC-32C. Otherwise says what is wrong.
Status VerifyCheckpoint(const std::string& run_dir, int64_t step, const CheckpointIdentity& id);

// Loads shard `shard` of checkpoint `step` after verifying the whole checkpoint (VerifyCheckpoint).
StatusOr<ShardCheckpoint> LoadShardCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, int shard,
                                              int64_t step);

// Loads shard `shard` of the newest checkpoint that verifies, logging each newer one skipped and
// why. nullopt when the run has no usable checkpoint.
StatusOr<std::optional<ShardCheckpoint>> LoadNewestShardCheckpoint(const std::string& run_dir,
                                                                   const CheckpointIdentity& id, int shard);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CHECKPOINT_CHECKPOINT_STORE_H_
