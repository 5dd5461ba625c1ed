// The BatchSource over any ParallelCorpus: training batches from a LengthBucketSampler, and the
// validation corpus cut into batches under the same budgets, in a fixed order.
#ifndef PSFORMER_WORKER_DATA_SAMPLED_BATCH_SOURCE_H_
#define PSFORMER_WORKER_DATA_SAMPLED_BATCH_SOURCE_H_

#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/data/batch_source.h"
#include "worker/data/length_bucket_sampler.h"
#include "worker/data/parallel_corpus.h"

namespace psformer {

class SampledBatchSource : public BatchSource {
 public:
  // Plans batches for `train` and cuts `valid` (may be empty) into batches; fails where the
  // sampler does (an empty training corpus, a pair over a token budget).
  static StatusOr<std::unique_ptr<SampledBatchSource>> Create(std::unique_ptr<ParallelCorpus> train,
                                                              std::unique_ptr<ParallelCorpus> valid,
                                                              const SamplerOptions& options, int vocab_size);

  // From parts Create has checked; prefer Create.
  SampledBatchSource(std::unique_ptr<ParallelCorpus> train, LengthBucketSampler sampler,
                     std::vector<Batch> valid_batches, int vocab_size)
      : train_(std::move(train)),
        sampler_(std::move(sampler)),
        valid_batches_(std::move(valid_batches)),
        vocab_size_(vocab_size) {}

  Batch TrainBatch(int64_t step, int worker, int workers) override;
  const std::vector<Batch>& ValidBatches() override { return valid_batches_; }
  int vocab_size() const override { return vocab_size_; }

  LengthBucketSampler& sampler() { return sampler_; }
  const ParallelCorpus& train_corpus() const { return *train_; }

 private:
  std::unique_ptr<ParallelCorpus> train_;
  LengthBucketSampler sampler_;
  std::vector<Batch> valid_batches_;
  int vocab_size_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_SAMPLED_BATCH_SOURCE_H_
