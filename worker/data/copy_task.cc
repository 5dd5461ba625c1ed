#include "worker/data/copy_task.h"

#include <vector>

#include "common/logging.h"
#include "worker/data/batch.h"
#include "worker/data/deterministic_random.h"

namespace psformer {
namespace {
// Stream tags ("copytrn", "copyval"): arbitrary constants that keep the two splits apart.
constexpr uint64_t kTrainStream = 0x636f707974726eULL;
constexpr uint64_t kValidStream = 0x636f707976616cULL;
}  // namespace

InMemoryCorpus MakeCopyCorpus(uint64_t seed, CopySplit split, const CopyTaskOptions& options) {
  PSF_CHECK(options.vocab_size > kNumReservedIds);
  PSF_CHECK(options.min_length >= 1 && options.min_length <= options.max_length);
  PSF_CHECK(options.pairs >= 0);
  SplitMix64 random(MixSeed(seed, split == CopySplit::kTrain ? kTrainStream : kValidStream));
  const uint64_t length_choices = static_cast<uint64_t>(options.max_length - options.min_length + 1);
  const uint64_t token_choices = static_cast<uint64_t>(options.vocab_size - kNumReservedIds);
  InMemoryCorpus corpus;
  std::vector<int32_t> tokens;  // (length)
  for (int64_t i = 0; i < options.pairs; ++i) {
    const int32_t length = options.min_length + static_cast<int32_t>(random.Below(length_choices));
    tokens.resize(length);
    for (int32_t& token : tokens) token = kNumReservedIds + static_cast<int32_t>(random.Below(token_choices));
    corpus.Add(tokens, tokens);
  }
  return corpus;
}

CopyTaskOptions CopyTaskOptionsFromConfig(const proto::DataConfig& data, CopySplit split) {
  CopyTaskOptions options;
  options.vocab_size = data.copy_vocab_size();
  options.min_length = data.copy_min_length();
  options.max_length = data.copy_max_length();
  options.pairs = split == CopySplit::kTrain ? data.copy_train_size() : data.copy_valid_size();
  return options;
}

}  // namespace psformer
