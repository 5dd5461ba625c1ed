// LengthBucketSampler: the global batch of every training step, as a pure function of
// (corpus lengths, options, seed, step), and each worker's share of it.
//
// Plan (made once, at construction): pairs are grouped into target-length buckets
// (bucket_width tokens wide, counting eos), sorted within a bucket by source length, then by
// target length, then by a seeded hash of the pair number; consecutive pairs of one bucket fill
// a batch while its PADDED size (sentences x longest row, eos/bos included) stays within both
// token budgets. Sorting by source length inside a target bucket keeps both sides' padding
// small without a bucket grid that would leave one partial batch per cell.
//
// Steps: step t (1-based) is batch index (t-1) mod N of epoch (t-1) / N, N = batches per epoch.
// With shuffle the batch order of each epoch is a permutation seeded by (seed, epoch), computed
// directly: resuming at step t replays nothing.
//
// Sharing among W workers: a global batch's pairs are kept sorted by total length (longest
// first, then pair number) and dealt round-robin, so worker w gets pairs w, w+W, ...; the
// shares are balanced in sentences and tokens and their union is the global batch for any W.
//
// Not thread-safe: the current epoch's permutation is cached.
#ifndef PSFORMER_WORKER_DATA_LENGTH_BUCKET_SAMPLER_H_
#define PSFORMER_WORKER_DATA_LENGTH_BUCKET_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/data/parallel_corpus.h"

namespace psformer {

struct SamplerOptions {
  int64_t src_tokens_per_step = 25000;  // padded source tokens of one global batch, at most
  int64_t tgt_tokens_per_step = 25000;  // padded target tokens of one global batch, at most
  int32_t bucket_width = 8;             // target lengths in one bucket differ by less than this
  bool shuffle = true;                  // permute the batch order every epoch
  uint64_t seed = 1;                    // seeds tie-breaking within buckets and the shuffles
};

// The options a config's batching and training sections name.
SamplerOptions SamplerOptionsFromConfig(const proto::JobConfig& config);

// Where a step falls.
struct StepPosition {
  int64_t epoch = 0;  // 0-based
  int64_t index = 0;  // 0-based position in that epoch's batch order
  int64_t batch = 0;  // which planned batch (the index after the epoch's permutation)
};

class LengthBucketSampler {
 public:
  // Plans the batches of `corpus` (only its lengths are read; it need not outlive the
  // sampler). Fails when the corpus is empty or when one pair alone exceeds a token budget.
  static StatusOr<LengthBucketSampler> Create(const ParallelCorpus& corpus, const SamplerOptions& options);

  int64_t batches_per_epoch() const { return static_cast<int64_t>(batches_.size()); }
  // The planned batches in unshuffled order, each sorted longest pair first.
  const std::vector<std::vector<int64_t>>& planned_batches() const { return batches_; }

  // REQUIRES: step >= 1.
  StepPosition Locate(int64_t step);
  // Pair numbers of step `step`'s global batch.
  const std::vector<int64_t>& GlobalBatch(int64_t step);
  // Worker `worker`'s share of it, in the order its batch rows take. REQUIRES: 0 <= worker < workers.
  std::vector<int64_t> WorkerShare(int64_t step, int worker, int workers);

 private:
  LengthBucketSampler(SamplerOptions options, std::vector<std::vector<int64_t>> batches)
      : options_(options), batches_(std::move(batches)) {}
  const std::vector<int64_t>& EpochOrder(int64_t epoch);

  SamplerOptions options_;
  std::vector<std::vector<int64_t>> batches_;  // (batches per epoch, pairs of each batch)
  std::optional<int64_t> cached_epoch_;
  std::vector<int64_t> cached_order_;  // (batches per epoch): the cached epoch's order
};

// Token counts of one epoch's global batches, each padded as one batch: `tokens` counts the
// non-pad entries (eos or bos included), `padded` sentences x padded length. Workers pad their
// shares separately, so with W > 1 the real padding is at most this.
struct PaddingStats {
  int64_t src_tokens = 0;
  int64_t tgt_tokens = 0;
  int64_t src_padded = 0;
  int64_t tgt_padded = 0;
  // Share of all padded entries (both sides) that are padding.
  double fraction() const {
    const int64_t padded = src_padded + tgt_padded;
    return padded == 0 ? 0.0 : 1.0 - static_cast<double>(src_tokens + tgt_tokens) / static_cast<double>(padded);
  }
};
PaddingStats EpochPadding(const ParallelCorpus& corpus, const LengthBucketSampler& sampler);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_LENGTH_BUCKET_SAMPLER_H_
