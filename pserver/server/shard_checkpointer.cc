#include "pserver/server/shard_checkpointer.h"

#include "common/host_groups.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace {

Status NoRunDirectory(const char* what) { return Status::NotFound(std::string("no run directory to ") + what); }

}  // namespace

CheckpointIdentity JobCheckpointIdentity(const proto::JobConfig& config, int vocab) {
  const ParamLayout layout(config.model(), vocab);
  CheckpointIdentity id;
  id.shards = config.cluster().servers();
  id.parameter_count = layout.total_size();
  id.config_digest = ModelConfigDigest(config, vocab);
  id.spread_layers = JobPieceTable(config, id.parameter_count, layout.LayerStarts()).spread();
  id.host_groups = HostGroups::Of(config).sizes();
  return id;
}

ShardCheckpointer::ShardCheckpointer(std::string run_dir, CheckpointIdentity identity, int shard, int keep_last)
    : run_dir_(std::move(run_dir)), identity_(identity), shard_(shard), keep_last_(keep_last) {}

StatusOr<std::optional<ShardCheckpoint>> ShardCheckpointer::LoadNewest() const {
  if (!enabled()) return NoRunDirectory("load checkpoints from");
  return LoadNewestShardCheckpoint(run_dir_, identity_, shard_);
}

StatusOr<ShardCheckpoint> ShardCheckpointer::Load(int64_t step) const {
  if (!enabled()) return NoRunDirectory("load checkpoints from");
  return LoadShardCheckpoint(run_dir_, identity_, shard_, step);
}

bool ShardCheckpointer::Complete(int64_t step) const {
  return enabled() && VerifyCheckpoint(run_dir_, step, identity_).ok();
}

Status ShardCheckpointer::Write(int64_t step, const ShardOptimizer& optimizer, ShardRange range,
                                std::vector<int64_t> worker_steps, std::function<void()> midway) const {
  if (!enabled()) return NoRunDirectory("write checkpoints to");
  ShardCheckpointView view;
  view.shard = shard_;
  view.shards = identity_.shards;
  view.step = step;
  view.updates = optimizer.updates();
  view.begin = range.begin;
  view.end = range.end;
  view.worker_steps = std::move(worker_steps);
  view.params = optimizer.params();
  view.m = optimizer.m();
  view.v = optimizer.v();
  view.midway = std::move(midway);
  return SaveShardCheckpoint(run_dir_, identity_, view, keep_last_);
}

}  // namespace psformer
