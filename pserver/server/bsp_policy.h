// BspPolicy: bulk-synchronous consistency (see consistency_policy.h). Step t's pushes are held
// until every worker's is in, summed in worker order (GradientAggregator), divided by their total
// target tokens, and applied as one Adam update at LearningRate(config, t). Since the order of
// arrival never matters, every run of the same job computes the same bits.
//
// With overlap the shard is collected piece by piece (PieceTable): each piece is summed and
// updated as soon as every worker's share of it is in, and a pull of step t for a piece is
// answered once that piece of t is applied. The elementwise update makes this bitwise the same
// as one update of the whole shard. A piece of the shared embedding whose DENSE parts all name
// their rows (docs/wire-protocol.md, "Rows named up front") is updated in two passes: every
// element outside the named rows as soon as every DENSE part is in (a pull of its DENSE part is
// answered then), the named rows once the ROWS parts are in too.
#ifndef PSFORMER_PSERVER_SERVER_BSP_POLICY_H_
#define PSFORMER_PSERVER_SERVER_BSP_POLICY_H_

#include <optional>
#include <vector>

#include "pserver/server/consistency_policy.h"
#include "pserver/server/gradient_aggregator.h"

namespace psformer {

class BspPolicy : public ConsistencyPolicy {
 public:
  // `piece_starts`: where the shard's pieces begin, relative to range.begin (one entry: whole
  // shard); `split_pieces`: 1 for each piece every worker pushes in two parts (DENSE and ROWS).
  // The sums are the update's (ShardOptimizer::ApplyPiece), on the optimizer's threads.
  BspPolicy(int workers, ShardRange range, const std::vector<uint64_t>& piece_starts,
            const std::vector<uint8_t>& split_pieces = {});

  void Restart(int64_t step) override;
  // Only the step being collected: later ones need this step's update first.
  bool PushTooEarly(int64_t step, const ShardProgress&) const override { return step != step_; }
  // Also: a ROWS part outside the rows its worker's DENSE part named, or outside what a piece's
  // first pass left out.
  std::string Inconsistent(int worker, const WireMessage& push) const override;
  std::optional<AppliedUpdate> Accept(int worker, WireMessage push, ShardOptimizer* optimizer) override;
  // The newest applied state is kept, and the one before it until the next update begins (a
  // restarted worker may need it; the server checks it is still there).
  bool Overtaken(int64_t step, const ShardProgress& p) const override { return step < p.applied_step - 1; }
  bool PullReady(const proto::Header& pull, const ShardProgress& p) const override;
  bool InProgress(int64_t step, const ShardProgress& p) const override { return step > p.applied_step; }
  bool CheckpointReady(int64_t step, const ShardProgress& p) const override {
    return p.applied_step >= step && done_count_ == 0 && outside_count_ == 0;
  }
  // The cut is "after step": pushes of step + 1 already held are not in it, and a resumed
  // server expects them again.
  std::vector<int64_t> CheckpointWorkerSteps(int64_t step, const ShardProgress& p) const override {
    return std::vector<int64_t>(p.worker_steps.size(), step);
  }
  bool AppliesWholeSteps() const override { return true; }

 private:
  int PieceAt(uint64_t begin) const;  // index of the piece starting at shard offset `begin`, or -1

  ShardRange range_;
  std::vector<uint64_t> starts_;  // piece starts, shard offsets, then the shard's size
  std::vector<GradientAggregator> pieces_;
  int64_t step_ = 1;              // the step being collected
  int done_count_ = 0;            // pieces of step_ applied (each when its aggregator completes)
  // Per piece: the runs its first pass left out (set once every DENSE part named its rows and is
  // in: the rest of the piece is applied then); and how many pieces have one.
  std::vector<std::optional<std::vector<ElementRun>>> named_;
  int outside_count_ = 0;
  std::vector<int> heard_;        // per worker: pieces of step_ taken
  std::vector<uint64_t> tokens_;  // per worker: target tokens its pieces of step_ carry
  std::vector<double> loss_;      // ...and summed loss
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_BSP_POLICY_H_
