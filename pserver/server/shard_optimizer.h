// ShardOptimizer: one shard's fp32 parameters and Adam moments, and the update applied to them.
// The learning rate comes from the paper's schedule at the step the gradient belongs to; Adam's
// bias correction counts updates applied (in BSP one per step, so the two agree; in SSP and async
// every push is an update). Replies to pulls are served from a snapshot taken after an update,
// so a reply still being sent never sees a later update half-applied.
//
// Each update is one pass over the shard, split across `threads` threads (ParallelFor): the
// gradient's normalisation, Adam, the snapshot for pulls (and its bf16 rounding when the job
// pulls bf16) and their CRC-32Cs, block by block while a block is in cache. Every float is
// computed elementwise, so the split changes no result; the CRCs of the pieces are combined.
//
// Thread safety: one thread (the server loop); the passes fan out to `threads` threads.
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

  // One Adam update for step `step` with gradient `grad` (size()), divided on the way by
  // target_tokens when that is > 0 (exactly NormalizeGradient's division; 0 = already normalised).
  // Also makes the snapshots pulls are served from, in the same pass.
  void Apply(int64_t step, const float* grad, uint64_t target_tokens = 0);

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
  // CRC-32C of the bytes of Snapshot() and Bf16Snapshot() (the payload CRC of a pull's reply),
  // computed once per snapshot.
  uint32_t SnapshotCrc32c();
  uint32_t Bf16SnapshotCrc32c();

 private:
  // An empty buffer of size() for a new snapshot: the old one's memory when no reply holds it.
  template <typename T>
  static std::shared_ptr<std::vector<T>> Recycle(std::shared_ptr<const std::vector<T>>* old, size_t n);

  const proto::JobConfig& config_;
  AdamHyper hyper_;
  int threads_;
  bool bf16_pulls_;  // cluster.param_dtype BF16: the update pass rounds too
  uint64_t updates_ = 0;
  std::vector<float> params_, m_, v_;  // (end - begin) each
  std::shared_ptr<const std::vector<float>> snapshot_;
  uint32_t snapshot_crc_ = 0;
  uint64_t snapshot_updates_ = ~0ull;
  std::shared_ptr<const std::vector<uint16_t>> bf16_snapshot_;  // of snapshot_, when made
  uint32_t bf16_crc_ = 0;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_SHARD_OPTIMIZER_H_
