// ConsistencyPolicy: what a parameter shard does differently in each consistency mode
// (cluster.consistency): when a push may be taken and how it is applied, when a pull or a
// checkpoint may be answered, and what a checkpoint records. One implementation per mode:
//   BspPolicy    bulk-synchronous: a step's pushes of every worker are summed in worker order and
//                applied as one update; a pull after step t waits for step t's update. Bitwise
//                reproducible (docs/determinism.md).
//   SspPolicy    stale-synchronous: each push applied on arrival; no worker pulls for step t+1
//                while another has not pushed step t - staleness.
//   AsyncPolicy  each push applied on arrival, pulls answered at once.
// The server keeps the state every mode shares (ShardProgress) and passes it in.
//
// Thread safety: one thread (the server loop).
#ifndef PSFORMER_PSERVER_SERVER_CONSISTENCY_POLICY_H_
#define PSFORMER_PSERVER_SERVER_CONSISTENCY_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "common/proto/wire.pb.h"
#include "pserver/server/shard_optimizer.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

// How far the job has come, as this shard sees it.
struct ShardProgress {
  int64_t applied_step = 0;           // BSP: the last step applied; else the highest step applied.
  std::vector<int64_t> worker_steps;  // the last step each worker pushed.
  int64_t SlowestWorkerStep() const;
};

// What taking a push changed.
struct AppliedUpdate {
  int64_t step = 0;
  // Every worker's push of `step` is in (BSP): the shard now stands "after step", the same on
  // every shard. Otherwise (BSP with overlap) one more piece of `step` is applied. Either way,
  // with the step's summed loss and target tokens.
  bool whole_step = false;
  bool partial = false;  // one piece of `step` applied, not yet all (the shard is between steps)
  // Only the elements of a split piece outside its named rows (GradientAggregator::EarlyMask):
  // the piece counts as applied at its second pass.
  bool outside_pass = false;
  double loss_sum = 0;
  uint64_t target_tokens = 0;
};

class ConsistencyPolicy {
 public:
  virtual ~ConsistencyPolicy() = default;

  // The shard now stands after `step` (start, resume, rollback): pushes held back are dropped.
  virtual void Restart(int64_t step) = 0;
  // Whether a push of `step` (the sender's next) comes before the parameters it was computed
  // from can exist here: a worker that skipped its pull. Such a push is refused.
  virtual bool PushTooEarly(int64_t step, const ShardProgress& progress) const = 0;
  // Why worker `worker`'s push (of a piece, validated) contradicts what it pushed before in the
  // same step; empty when it does not. Such a push is refused.
  virtual std::string Inconsistent(int /*worker*/, const WireMessage& /*push*/) const { return ""; }
  // Takes worker `worker`'s accepted push and applies what it completes to `optimizer`.
  virtual std::optional<AppliedUpdate> Accept(int worker, WireMessage push, ShardOptimizer* optimizer) = 0;
  // Whether a pull or checkpoint of `step` asks for a state this shard has moved past for good.
  virtual bool Overtaken(int64_t step, const ShardProgress& progress) const = 0;
  // Whether a pull (from a worker or the coordinator) may be answered now; else it waits.
  virtual bool PullReady(const proto::Header& pull, const ShardProgress& progress) const = 0;
  // Whether a ready pull of `step` reads the update still in progress (BSP with overlap: its
  // applied pieces) rather than the last finished one.
  virtual bool InProgress(int64_t /*step*/, const ShardProgress& /*progress*/) const { return false; }
  // Whether the checkpoint of `step` may be written now; else it waits.
  virtual bool CheckpointReady(int64_t step, const ShardProgress& progress) const = 0;
  // The per-worker steps a checkpoint labelled `step` records (what a resumed shard expects next).
  virtual std::vector<int64_t> CheckpointWorkerSteps(int64_t step, const ShardProgress& progress) const = 0;
  // Whether every shard applies the same whole steps, so a checkpoint of the last applied step
  // written by each shard alone forms a complete, consistent checkpoint (BSP).
  virtual bool AppliesWholeSteps() const = 0;
};

// The policy for config.cluster().consistency(), for the shard `range` cut into pieces at
// `piece_starts` (offsets in the shard; empty = one piece, the only choice outside BSP), with
// `split_pieces` 1 for each piece pushed in two parts (PieceTable's split); its passes over
// pushes fan out to `threads` threads.
std::unique_ptr<ConsistencyPolicy> MakeConsistencyPolicy(const proto::JobConfig& config, ShardRange range,
                                                         int threads = 1,
                                                         const std::vector<uint64_t>& piece_starts = {},
                                                         const std::vector<uint8_t>& split_pieces = {});

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_CONSISTENCY_POLICY_H_
