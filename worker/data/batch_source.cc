#include "worker/data/batch_source.h"

#include "worker/data/copy_task.h"
#include "worker/data/sampled_batch_source.h"

namespace psformer {

StatusOr<std::unique_ptr<BatchSource>> MakeBatchSource(const proto::JobConfig& config) {
  const SamplerOptions options = SamplerOptionsFromConfig(config);
  const uint64_t seed = config.training().seed();
  if (config.data().task() == proto::DataConfig::COPY) {
    auto train = std::make_unique<InMemoryCorpus>(
        MakeCopyCorpus(seed, CopySplit::kTrain, CopyTaskOptionsFromConfig(config.data(), CopySplit::kTrain)));
    auto valid = std::make_unique<InMemoryCorpus>(
        MakeCopyCorpus(seed, CopySplit::kValid, CopyTaskOptionsFromConfig(config.data(), CopySplit::kValid)));
    auto source =
        SampledBatchSource::Create(std::move(train), std::move(valid), options, config.data().copy_vocab_size());
    if (!source.ok()) return source.status().WithContext("copy task");
    return std::unique_ptr<BatchSource>(std::move(source).value());
  }
  return Status::Unimplemented("data.task = CORPUS: reading prepared corpora is not built yet");
}

}  // namespace psformer
