#include "worker/data/length_bucket_sampler.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

#include "common/logging.h"
#include "worker/data/batch_builder.h"
#include "worker/data/deterministic_random.h"

namespace psformer {
namespace {
constexpr uint64_t kTieBreakStream = 0x7469656272656bULL;  // "tiebrek"
constexpr uint64_t kShuffleStream = 0x73687566666c65ULL;   // "shuffle"

struct PairKey {
  int32_t bucket;  // target padded length / bucket width
  int32_t src;     // padded source length (tokens + eos)
  int32_t tgt;     // padded target length (tokens + bos or eos)
  uint64_t tie;    // seeded hash of the pair number
  int64_t id;
  auto Tuple() const { return std::tie(bucket, src, tgt, tie, id); }
};
}  // namespace

SamplerOptions SamplerOptionsFromConfig(const proto::JobConfig& config) {
  SamplerOptions options;
  options.src_tokens_per_step = config.batching().src_tokens_per_step();
  options.tgt_tokens_per_step = config.batching().tgt_tokens_per_step();
  options.bucket_width = config.batching().bucket_width();
  options.shuffle = config.batching().shuffle();
  options.seed = config.training().seed();
  return options;
}

StatusOr<LengthBucketSampler> LengthBucketSampler::Create(const ParallelCorpus& corpus, const SamplerOptions& options) {
  PSF_CHECK(options.bucket_width > 0 && options.src_tokens_per_step > 0 && options.tgt_tokens_per_step > 0);
  const int64_t n = corpus.size();
  if (n == 0) return Status::InvalidArgument("the corpus has no sentence pairs");
  std::vector<PairKey> keys(static_cast<size_t>(n));
  const uint64_t tie_seed = MixSeed(options.seed, kTieBreakStream);
  for (int64_t id = 0; id < n; ++id) {
    const int32_t src = corpus.src_length(id) + 1;
    const int32_t tgt = corpus.tgt_length(id) + 1;
    if (src > options.src_tokens_per_step) {
      return Status::InvalidArgument("pair " + std::to_string(id) + " has " + std::to_string(src) +
                                     " source tokens (with eos), more than batching.src_tokens_per_step (" +
                                     std::to_string(options.src_tokens_per_step) + ")");
    }
    if (tgt > options.tgt_tokens_per_step) {
      return Status::InvalidArgument("pair " + std::to_string(id) + " has " + std::to_string(tgt) +
                                     " target tokens (with eos), more than batching.tgt_tokens_per_step (" +
                                     std::to_string(options.tgt_tokens_per_step) + ")");
    }
    keys[id] = PairKey{tgt / options.bucket_width, src, tgt, MixSeed(tie_seed, static_cast<uint64_t>(id)), id};
  }
  std::sort(keys.begin(), keys.end(), [](const PairKey& a, const PairKey& b) { return a.Tuple() < b.Tuple(); });

  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> current;
  int64_t max_src = 0;
  int64_t max_tgt = 0;
  int32_t bucket = -1;
  for (const PairKey& key : keys) {
    const int64_t count = static_cast<int64_t>(current.size()) + 1;
    const bool fits = count * std::max<int64_t>(max_src, key.src) <= options.src_tokens_per_step &&
                      count * std::max<int64_t>(max_tgt, key.tgt) <= options.tgt_tokens_per_step;
    if (!current.empty() && (key.bucket != bucket || !fits)) {
      batches.push_back(std::move(current));
      current.clear();
      max_src = 0;
      max_tgt = 0;
    }
    bucket = key.bucket;
    current.push_back(key.id);
    max_src = std::max<int64_t>(max_src, key.src);
    max_tgt = std::max<int64_t>(max_tgt, key.tgt);
  }
  batches.push_back(std::move(current));

  // Longest pair first, so that dealing round-robin balances the workers' shares.
  for (auto& batch : batches) {
    std::sort(batch.begin(), batch.end(), [&corpus](int64_t a, int64_t b) {
      const int64_t la = corpus.src_length(a) + corpus.tgt_length(a);
      const int64_t lb = corpus.src_length(b) + corpus.tgt_length(b);
      return la != lb ? la > lb : a < b;
    });
  }
  return LengthBucketSampler(options, std::move(batches));
}

const std::vector<int64_t>& LengthBucketSampler::EpochOrder(int64_t epoch) {
  if (cached_epoch_ != epoch) {
    cached_order_.resize(batches_.size());
    std::iota(cached_order_.begin(), cached_order_.end(), int64_t{0});
    if (options_.shuffle) {
      SplitMix64 random(MixSeed(MixSeed(options_.seed, kShuffleStream), static_cast<uint64_t>(epoch)));
      DeterministicShuffle(&cached_order_, &random);
    }
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

StepPosition LengthBucketSampler::Locate(int64_t step) {
  PSF_CHECK(step >= 1);
  StepPosition position;
  position.epoch = (step - 1) / batches_per_epoch();
  position.index = (step - 1) % batches_per_epoch();
  position.batch = EpochOrder(position.epoch)[position.index];
  return position;
}

const std::vector<int64_t>& LengthBucketSampler::GlobalBatch(int64_t step) { return batches_[Locate(step).batch]; }

std::vector<int64_t> LengthBucketSampler::WorkerShare(int64_t step, int worker, int workers) {
  PSF_CHECK(workers >= 1 && worker >= 0 && worker < workers);
  const std::vector<int64_t>& global = GlobalBatch(step);
  std::vector<int64_t> share;
  share.reserve(global.size() / workers + 1);
  for (size_t i = static_cast<size_t>(worker); i < global.size(); i += static_cast<size_t>(workers)) {
    share.push_back(global[i]);
  }
  return share;
}

PaddingStats EpochPadding(const ParallelCorpus& corpus, const LengthBucketSampler& sampler) {
  PaddingStats stats;
  for (const auto& ids : sampler.planned_batches()) {
    const PaddedSize padded = PaddedBatchSize(corpus, ids);
    stats.src_padded += padded.src;
    stats.tgt_padded += padded.tgt;
    for (int64_t id : ids) {
      stats.src_tokens += corpus.src_length(id) + 1;
      stats.tgt_tokens += corpus.tgt_length(id) + 1;
    }
  }
  return stats;
}

}  // namespace psformer
