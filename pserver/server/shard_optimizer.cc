#include "pserver/server/shard_optimizer.h"

#include <cstring>

#include "common/logging.h"
#include "common/lr_schedule.h"
#include "pserver/wire/bfloat16.h"

namespace psformer {

ShardOptimizer::ShardOptimizer(const proto::JobConfig& config, uint64_t begin, uint64_t end, int threads)
    : config_(config), threads_(threads), params_(end - begin), m_(end - begin), v_(end - begin) {
  hyper_.beta1 = config.optimizer().beta1();
  hyper_.beta2 = config.optimizer().beta2();
  hyper_.epsilon = config.optimizer().epsilon();
}

void ShardOptimizer::Initialize(const std::function<void(uint64_t, uint64_t, float*)>& init) {
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  updates_ = 0;
  snapshot_.reset();
  bf16_snapshot_.reset();
  init(0, params_.size(), params_.data());
}

void ShardOptimizer::Restore(ShardCheckpoint checkpoint) {
  PSF_CHECK(checkpoint.params.size() == params_.size());
  params_ = std::move(checkpoint.params);
  m_ = std::move(checkpoint.m);
  v_ = std::move(checkpoint.v);
  updates_ = checkpoint.updates;
  snapshot_.reset();
  bf16_snapshot_.reset();
}

void ShardOptimizer::Apply(int64_t step, const float* grad) {
  ++updates_;
  const double lr = LearningRate(config_, step);
  AdamUpdateParallel(hyper_, static_cast<int64_t>(updates_), lr, params_.size(), grad, params_.data(), m_.data(),
                     v_.data(), threads_);
}

std::shared_ptr<const std::vector<float>> ShardOptimizer::Snapshot() {
  if (snapshot_ && snapshot_updates_ == updates_) return snapshot_;
  // Reuse the old snapshot's memory when no reply holds it any more.
  std::shared_ptr<std::vector<float>> fresh;
  if (snapshot_ && snapshot_.use_count() == 1) {
    fresh = std::const_pointer_cast<std::vector<float>>(snapshot_);
    snapshot_.reset();
  } else {
    fresh = std::make_shared<std::vector<float>>(params_.size());
  }
  std::memcpy(fresh->data(), params_.data(), params_.size() * sizeof(float));
  snapshot_ = std::move(fresh);
  snapshot_updates_ = updates_;
  bf16_snapshot_.reset();  // rounded from the old values
  return snapshot_;
}

std::shared_ptr<const std::vector<uint16_t>> ShardOptimizer::Bf16Snapshot() {
  const std::shared_ptr<const std::vector<float>> exact = Snapshot();  // drops a stale bf16 copy
  if (bf16_snapshot_) return bf16_snapshot_;
  auto rounded = std::make_shared<std::vector<uint16_t>>(exact->size());
  FloatsToBf16(exact->data(), exact->size(), rounded->data());
  bf16_snapshot_ = std::move(rounded);
  return bf16_snapshot_;
}

}  // namespace psformer
