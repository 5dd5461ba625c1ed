#include "worker/data/sampled_batch_source.h"

#include "common/logging.h"
#include "worker/data/batch_builder.h"

namespace psformer {

StatusOr<std::unique_ptr<SampledBatchSource>> SampledBatchSource::Create(std::unique_ptr<ParallelCorpus> train,
                                                                         std::unique_ptr<ParallelCorpus> valid,
                                                                         const SamplerOptions& options,
                                                                         int vocab_size) {
  PSF_CHECK(train != nullptr);
  auto sampler = LengthBucketSampler::Create(*train, options);
  if (!sampler.ok()) return sampler.status().WithContext("training data");
  std::vector<Batch> valid_batches;
  if (valid != nullptr && valid->size() > 0) {
    SamplerOptions valid_options = options;
    valid_options.shuffle = false;
    auto valid_sampler = LengthBucketSampler::Create(*valid, valid_options);
    if (!valid_sampler.ok()) return valid_sampler.status().WithContext("validation data");
    for (const auto& ids : valid_sampler->planned_batches()) valid_batches.push_back(BuildBatch(*valid, ids));
  }
  return std::make_unique<SampledBatchSource>(std::move(train), std::move(sampler).value(), std::move(valid_batches),
                                              vocab_size);
}

Batch SampledBatchSource::TrainBatch(int64_t step, int worker, int workers) {
  const std::vector<int64_t> share = sampler_.WorkerShare(step, worker, workers);
  return BuildBatch(*train_, share);
}

}  // namespace psformer
