// AsyncPolicy and SspPolicy (see consistency_policy.h): every push is divided by its own target
// tokens and applied on arrival, at the learning rate of its step; checkpoints hold the current
// state, labelled with the step asked for. Not reproducible from run to run: the order of
// arrival decides the order of updates.
//   AsyncPolicy  no waiting at all.
//   SspPolicy    a worker may run at most cluster.staleness steps ahead of the slowest one: a
//                worker's pull after step t waits until every worker has pushed t - staleness.
#ifndef PSFORMER_PSERVER_SERVER_ASYNC_POLICY_H_
#define PSFORMER_PSERVER_SERVER_ASYNC_POLICY_H_

#include "pserver/server/consistency_policy.h"

namespace psformer {

class AsyncPolicy : public ConsistencyPolicy {
 public:
  // The copy of each push to fp32 fans out to `threads` threads.
  explicit AsyncPolicy(ShardRange range, int threads = 1) : range_(range), threads_(threads) {}

  void Restart(int64_t) override {}  // nothing is held back.
  bool PushTooEarly(int64_t, const ShardProgress&) const override { return false; }
  std::optional<AppliedUpdate> Accept(int worker, WireMessage push, ShardOptimizer* optimizer) override;
  bool Overtaken(int64_t, const ShardProgress&) const override { return false; }
  bool PullReady(const proto::Header&, const ShardProgress&) const override { return true; }
  bool CheckpointReady(int64_t, const ShardProgress&) const override { return true; }
  std::vector<int64_t> CheckpointWorkerSteps(int64_t, const ShardProgress& p) const override { return p.worker_steps; }
  bool AppliesWholeSteps() const override { return false; }

 private:
  ShardRange range_;
  int threads_;
  std::vector<float> grad_;  // one push as fp32.   (range size)
};

class SspPolicy : public AsyncPolicy {
 public:
  SspPolicy(ShardRange range, int staleness, int threads = 1) : AsyncPolicy(range, threads), staleness_(staleness) {}

  // A push may not come from further ahead than a pull could have let its worker be.
  bool PushTooEarly(int64_t step, const ShardProgress& p) const override {
    return p.SlowestWorkerStep() < step - 1 - staleness_;
  }
  // Only workers are held back; the coordinator's pulls are answered at once.
  bool PullReady(const proto::Header& pull, const ShardProgress& p) const override {
    return pull.sender_role() != proto::WORKER || p.SlowestWorkerStep() >= pull.step() - staleness_;
  }

 private:
  int staleness_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_ASYNC_POLICY_H_
