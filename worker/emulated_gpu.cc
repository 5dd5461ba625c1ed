#include "worker/emulated_gpu.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "common/config_loader.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/param_layout.h"
#include "common/philox.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

// Philox for every element would cost one core about 2 s per 63M elements; one Philox call per
// block of kBlock elements, spread over the block by an integer hash that vectorises, costs about
// as much as writing the values.
constexpr uint64_t kBlock = 1024;

}  // namespace

uint32_t ParameterDigest(const float* params, uint64_t n) { return Crc32c(0, params, n * sizeof(float)); }

void FillEmulatedGradient(const EmulatedGradientKey& key, uint64_t begin, uint64_t end, float* grad) {
  const PhiloxKey philox_key{{key.params_digest, static_cast<uint32_t>(key.seed)}};
  for (uint64_t block = begin / kBlock; block * kBlock < end; ++block) {
    // The block's words: counter (block, range begin, step, worker), key (digest, seed).
    const PhiloxCounter words = Philox4x32_10(
        PhiloxCounter{{static_cast<uint32_t>(block), static_cast<uint32_t>(begin), key.step, key.worker}}, philox_key);
    const uint32_t salt = words.v[0], multiplier = words.v[1] | 1u;
    const uint64_t b = std::max(block * kBlock, begin), e = std::min(block * kBlock + kBlock, end);
    for (uint64_t i = b; i < e; ++i) {
      // A murmur-style finaliser of (element, salt): every output bit depends on every input bit.
      uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B9u ^ salt;
      x ^= x >> 16;
      x *= 0x85EBCA6Bu;
      x ^= x >> 13;
      x *= multiplier;
      x ^= x >> 16;
      // The top 24 bits as a signed integer times 2^-23: exactly representable, in [-1, 1).
      grad[i] = static_cast<float>(static_cast<int32_t>(x) >> 8) * (1.0f / 8388608.0f);
    }
  }
}

EmulatedGpu::EmulatedGpu(const proto::JobConfig& config, int worker)
    : seed_(config.training().seed()),
      worker_(worker),
      step_time_(std::chrono::milliseconds(config.cluster().emulated_step_ms())) {
  const int vocab = ResolvedVocabSize(config);
  PSF_CHECK(vocab > 0);
  const ParamLayout layout(config.model(), vocab);
  n_ = layout.total_size();
  const std::vector<uint64_t> starts = layout.LayerStarts();
  for (size_t l = 0; l < starts.size(); ++l) ranges_.push_back({starts[l], l + 1 < starts.size() ? starts[l + 1] : n_});
  std::reverse(ranges_.begin(), ranges_.end());
  const int workers = std::max(1, config.cluster().workers());
  const int64_t total = config.batching().tgt_tokens_per_step();
  stats_.target_tokens = total / workers + (worker < total % workers ? 1 : 0);
  stats_.loss_sum = static_cast<double>(stats_.target_tokens) * std::log(static_cast<double>(vocab));
}

StepStats EmulatedGpu::Step(int64_t step, const float* params, float* grad, const GradientReady& ready) {
  const Clock::time_point start = Clock::now();
  const auto forward = step_time_ / 3;
  const auto backward = step_time_ - forward;
  const EmulatedGradientKey key{seed_, static_cast<uint32_t>(step), static_cast<uint32_t>(worker_),
                                ParameterDigest(params, n_)};
  std::this_thread::sleep_until(start + forward);
  uint64_t done = 0;
  for (const Range& range : ranges_) {
    FillEmulatedGradient(key, range.first, range.second, grad);
    done += range.second - range.first;
    const auto share = std::chrono::duration_cast<Clock::duration>(backward * (static_cast<double>(done) / n_));
    std::this_thread::sleep_until(start + forward + share);
    if (ready) ready(range.first, range.second, stats_);
  }
  return stats_;
}

}  // namespace psformer
