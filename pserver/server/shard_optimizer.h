// ShardOptimizer: one shard's fp32 parameters and Adam moments, and the update applied to them.
// The learning rate comes from the paper's schedule at the step the gradient belongs to; Adam's
// bias correction counts updates applied (in BSP one per step, so the two agree; in SSP and async
// every push is an update). Replies to pulls are served from a snapshot taken after an update,
// so a reply still being sent never sees a later update half-applied.
//
// Thread safety: one thread (the server loop); the update itself fans out to `threads` threads.
#ifndef PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_
#define PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/adam.h"
#include "common/checkpoint/shard_file.h"
#include "common/proto/config.pb.h"

namespace psformer {

class ShardOptimizer {
 public:
  // Elements [begin, end) of the flat vector; `config` supplies optimizer and schedule.
  ShardOptimizer(const proto::JobConfig& config, uint64_t begin, uint64_t end, int threads);

  // Fills the parameters with init(begin, end, out); moments to zero.
  void Initialize(const std::function<void(uint64_t, uint64_t, float*)>& init);
  // Takes parameters, moments and update count from a loaded checkpoint of this range.
  void Restore(ShardCheckpoint checkpoint);

  // One Adam update with the already normalised gradient `grad` (size()) for step `step`.
  void Apply(int64_t step, const float* grad);

  uint64_t size() const { return params_.size(); }
  uint64_t updates() const { return updates_; }
  const float* params() const { return params_.data(); }  // (size())
  const float* m() const { return m_.data(); }            // (size())
  const float* v() const { return v_.data(); }            // (size())

  // The parameters as they are now, shared read-only; copied at most once per update.
  std::shared_ptr<const std::vector<float>> Snapshot();
  // The same rounded to bf16 (pulls for BFLOAT16), also made at most once per update: under BSP
  // every worker pulls the same step, and one rounding serves them all.
  std::shared_ptr<const std::vector<uint16_t>> Bf16Snapshot();

 private:
  const proto::JobConfig& config_;
  AdamHyper hyper_;
  int threads_;
  uint64_t updates_ = 0;
  std::vector<float> params_, m_, v_;  // (end - begin) each
  std::shared_ptr<const std::vector<float>> snapshot_;
  uint64_t snapshot_updates_ = ~0ull;
  std::shared_ptr<const std::vector<uint16_t>> bf16_snapshot_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_
