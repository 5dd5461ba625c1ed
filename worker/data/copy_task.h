// The copy task: random token sequences whose target is the source itself. It needs no files,
// so the model, the worker loop and the fault tests can train on it anywhere; a model that has
// learnt it shows that attention, masking and the optimizer work together.
#ifndef PSFORMER_WORKER_DATA_COPY_TASK_H_
#define PSFORMER_WORKER_DATA_COPY_TASK_H_

#include <cstdint>

#include "common/proto/config.pb.h"
#include "worker/data/in_memory_corpus.h"

namespace psformer {

struct CopyTaskOptions {
  int32_t vocab_size = 16;  // tokens are drawn from [kNumReservedIds, vocab_size)
  int32_t min_length = 3;   // sequence lengths uniform in [min_length, max_length]
  int32_t max_length = 10;
  int64_t pairs = 20000;
};

// Which of the task's data sets to generate: each comes from its own random stream of the seed,
// so the validation set never shares a stream with training, whatever the sizes.
enum class CopySplit { kTrain, kValid };

// `options.pairs` sequences, a pure function of (seed, split, options).
// REQUIRES: vocab_size > kNumReservedIds, 1 <= min_length <= max_length, pairs >= 0
// (ValidateConfig enforces these for configs).
InMemoryCorpus MakeCopyCorpus(uint64_t seed, CopySplit split, const CopyTaskOptions& options);

// The options a config's data section names, for `split`.
CopyTaskOptions CopyTaskOptionsFromConfig(const proto::DataConfig& data, CopySplit split);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_COPY_TASK_H_
