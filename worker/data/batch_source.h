// Where a worker's batches come from. A pure function of (data, config, seed, step, worker):
// the same call gives the same batch in any process, so a restarted worker recomputes exactly
// the batch it lost, and resuming at step t needs no replay (docs/determinism.md).
#ifndef PSFORMER_WORKER_DATA_BATCH_SOURCE_H_
#define PSFORMER_WORKER_DATA_BATCH_SOURCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/data/batch.h"

namespace psformer {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The batch worker `worker` of `workers` trains on at `step` (1-based). The step's global
  // batch (the configured token budget) is split among the workers; their union is the same
  // sentences whatever `workers` is. A worker's share may be empty (sentences == 0) when a
  // global batch has fewer sentences than workers.
  virtual Batch TrainBatch(int64_t step, int worker, int workers) = 0;
  // The validation set in batches (fixed order).
  virtual const std::vector<Batch>& ValidBatches() = 0;
  // Size of the shared vocabulary, reserved ids included.
  virtual int vocab_size() const = 0;
};

// The source the config names: the copy task (data.task = COPY) or a prepared corpus (CORPUS).
StatusOr<std::unique_ptr<BatchSource>> MakeBatchSource(const proto::JobConfig& config);

// A prepared corpus (data.task CORPUS, read by workers) and a model.vocab_size set in the config
// must agree: the servers size the embedding by the config and the workers by the corpus's
// spm.model, so a job of two sizes would fail at its first pull. InvalidArgument naming both and
// the fix (or spm.model's own error, a missing one too); OK for the copy task, emulated workers
// and vocab_size 0 (taken from the data).
Status CheckVocabularyMatchesData(const proto::JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_BATCH_SOURCE_H_
