#include "pserver/server/shard_optimizer.h"

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/parallel_for.h"
#include "pserver/wire/bfloat16.h"

namespace psformer {
namespace {

// Elements per block of the fused pass: a block's five fp32 streams and its bf16 copy stay in
// the L2 cache between the update and the checksums that read it back.
constexpr size_t kBlock = 8192;

// Per-piece CRC-32Cs of a pass, combined in piece order.
struct PieceCrcs {
  explicit PieceCrcs(int pieces) : crc(pieces, 0), bytes(pieces, 0) {}
  uint32_t Combined() const {
    uint32_t whole = 0;
    for (size_t p = 0; p < crc.size(); ++p) whole = Crc32cCombine(whole, crc[p], bytes[p]);
    return whole;
  }
  std::vector<uint32_t> crc;
  std::vector<uint64_t> bytes;
};

}  // namespace

ShardOptimizer::ShardOptimizer(const proto::JobConfig& config, uint64_t begin, uint64_t end, int threads)
    : config_(config),
      threads_(threads),
      bf16_pulls_(config.cluster().param_dtype() == proto::ClusterConfig::BF16),
      params_(end - begin),
      m_(end - begin),
      v_(end - begin) {
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
  snapshot_updates_ = ~0ull;
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
  snapshot_updates_ = ~0ull;
}

template <typename T>
std::shared_ptr<std::vector<T>> ShardOptimizer::Recycle(std::shared_ptr<const std::vector<T>>* old, size_t n) {
  std::shared_ptr<std::vector<T>> fresh;
  if (*old && old->use_count() == 1) fresh = std::const_pointer_cast<std::vector<T>>(*old);
  old->reset();
  return fresh ? fresh : std::make_shared<std::vector<T>>(n);
}

void ShardOptimizer::Apply(int64_t step, const float* grad, uint64_t target_tokens) {
  ++updates_;
  const AdamStepConstants k = AdamConstants(hyper_, static_cast<int64_t>(updates_), LearningRate(config_, step));
  const size_t n = params_.size();
  const std::shared_ptr<std::vector<float>> exact = Recycle(&snapshot_, n);
  const std::shared_ptr<std::vector<uint16_t>> rounded = bf16_pulls_ ? Recycle(&bf16_snapshot_, n) : nullptr;
  bf16_snapshot_.reset();
  const int pieces = ParallelPieces(threads_, n, kBlock);
  PieceCrcs exact_crc(pieces), rounded_crc(pieces);
  const float tokens = static_cast<float>(target_tokens);
  float* param = params_.data();
  float* m = m_.data();
  float* v = v_.data();
  float* out = exact->data();
  uint16_t* out16 = rounded ? rounded->data() : nullptr;
  ParallelFor(threads_, n, kBlock, [&](int piece, size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t e = std::min(end, b + kBlock);
      if (target_tokens > 0) {
        for (size_t i = b; i < e; ++i) {
          out[i] = param[i] = AdamElement(k, NormalizedGradient(grad[i], tokens), param[i], &m[i], &v[i]);
        }
      } else {
        for (size_t i = b; i < e; ++i) out[i] = param[i] = AdamElement(k, grad[i], param[i], &m[i], &v[i]);
      }
      exact_crc.crc[piece] = Crc32c(exact_crc.crc[piece], out + b, (e - b) * sizeof(float));
      if (out16 != nullptr) {
        FloatsToBf16(out + b, e - b, out16 + b);
        rounded_crc.crc[piece] = Crc32c(rounded_crc.crc[piece], out16 + b, (e - b) * sizeof(uint16_t));
      }
    }
    exact_crc.bytes[piece] = (end - begin) * sizeof(float);
    rounded_crc.bytes[piece] = (end - begin) * sizeof(uint16_t);
  });
  snapshot_ = exact;
  snapshot_crc_ = exact_crc.Combined();
  snapshot_updates_ = updates_;
  if (rounded) {
    bf16_snapshot_ = rounded;
    bf16_crc_ = rounded_crc.Combined();
  }
}

std::shared_ptr<const std::vector<float>> ShardOptimizer::Snapshot() {
  if (snapshot_ && snapshot_updates_ == updates_) return snapshot_;
  // Only before the first update after Initialize or Restore: Apply makes the others.
  const size_t n = params_.size();
  const std::shared_ptr<std::vector<float>> fresh = Recycle(&snapshot_, n);
  bf16_snapshot_.reset();  // rounded from the old values
  PieceCrcs crc(ParallelPieces(threads_, n, kBlock));
  ParallelFor(threads_, n, kBlock, [&](int piece, size_t begin, size_t end) {
    std::memcpy(fresh->data() + begin, params_.data() + begin, (end - begin) * sizeof(float));
    crc.crc[piece] = Crc32c(0, fresh->data() + begin, (end - begin) * sizeof(float));
    crc.bytes[piece] = (end - begin) * sizeof(float);
  });
  snapshot_ = fresh;
  snapshot_crc_ = crc.Combined();
  snapshot_updates_ = updates_;
  return snapshot_;
}

std::shared_ptr<const std::vector<uint16_t>> ShardOptimizer::Bf16Snapshot() {
  const std::shared_ptr<const std::vector<float>> exact = Snapshot();  // drops a stale bf16 copy
  if (bf16_snapshot_) return bf16_snapshot_;
  const size_t n = exact->size();
  auto rounded = std::make_shared<std::vector<uint16_t>>(n);
  PieceCrcs crc(ParallelPieces(threads_, n, kBlock));
  ParallelFor(threads_, n, kBlock, [&](int piece, size_t begin, size_t end) {
    FloatsToBf16(exact->data() + begin, end - begin, rounded->data() + begin);
    crc.crc[piece] = Crc32c(0, rounded->data() + begin, (end - begin) * sizeof(uint16_t));
    crc.bytes[piece] = (end - begin) * sizeof(uint16_t);
  });
  bf16_snapshot_ = std::move(rounded);
  bf16_crc_ = crc.Combined();
  return bf16_snapshot_;
}

uint32_t ShardOptimizer::SnapshotCrc32c() {
  Snapshot();
  return snapshot_crc_;
}

uint32_t ShardOptimizer::Bf16SnapshotCrc32c() {
  Bf16Snapshot();
  return bf16_crc_;
}

}  // namespace psformer
