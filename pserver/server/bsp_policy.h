// BspPolicy: bulk-synchronous consistency (see consistency_policy.h). Step t's pushes are held
// until every worker's is in, summed in worker order (GradientAggregator), divided by their total
// target tokens, and applied as one Adam update at LearningRate(config, t). Since the order of
// arrival never matters, every run of the same job computes the same bits.
#ifndef PSFORMER_PSERVER_SERVER_BSP_POLICY_H_
#define PSFORMER_PSERVER_SERVER_BSP_POLICY_H_

#include "pserver/server/consistency_policy.h"
#include "pserver/server/gradient_aggregator.h"

namespace psformer {

class BspPolicy : public ConsistencyPolicy {
 public:
  // The sums fan out to `threads` threads.
  BspPolicy(int workers, ShardRange range, int threads = 1);

  void Restart(int64_t step) override { aggregator_.Begin(step + 1); }
  // Only the step being collected: later ones need this step's update first.
  bool PushTooEarly(int64_t step, const ShardProgress&) const override { return step != aggregator_.step(); }
  std::optional<AppliedUpdate> Accept(int worker, WireMessage push, ShardOptimizer* optimizer) override;
  // Only the newest applied state is kept.
  bool Overtaken(int64_t step, const ShardProgress& p) const override { return step < p.applied_step; }
  bool PullReady(const proto::Header& pull, const ShardProgress& p) const override {
    return p.applied_step >= pull.step();
  }
  bool CheckpointReady(int64_t step, const ShardProgress& p) const override { return p.applied_step >= step; }
  // The cut is "after step": pushes of step + 1 already held are not in it, and a resumed
  // server expects them again.
  std::vector<int64_t> CheckpointWorkerSteps(int64_t step, const ShardProgress& p) const override {
    return std::vector<int64_t>(p.worker_steps.size(), step);
  }
  bool AppliesWholeSteps() const override { return true; }

 private:
  GradientAggregator aggregator_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_BSP_POLICY_H_
