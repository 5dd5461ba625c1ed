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

// Checks a prepared corpus (data.task CORPUS, read by workers) against itself and the config
// before a job starts, from spm.model and the corpus files' headers:
//   - train.bin and valid.bin were encoded with this spm.model: the same vocabulary size and,
//     where the file records it (corpus_file.h, version 2), the same SentencePiece digest, since
//     the ids of another model of the same size would train, silently, on the wrong pieces;
//   - a model.vocab_size set in the config is spm.model's: the servers size the embedding by the
//     config and the workers by spm.model, so a job of two sizes would fail at its first pull;
//   - there is a validation set (a valid.bin with pairs) when the training config asks for
//     validation (valid_every, valid_bleu_sentences, stop_at_valid_*), which would otherwise
//     report zeros as if measured.
// InvalidArgument naming the files and the fix (or spm.model's or a header's own error, a
// missing file too); OK for the copy task and emulated workers.
Status CheckPreparedCorpus(const proto::JobConfig& config);

// What identifies a prepared corpus's content, read from its files' headers alone: each file's
// counts and the CRC-32C of its data as recorded ("train.bin: 31102 pairs, 812345 + 790012
// tokens, data CRC-32C 1a2b3c4d; valid.bin: ..."). Under mpirun every rank reads its own host's
// copy of data.train_dir, and the ranks compare these to know they train on one corpus
// (spm.model is pinned by data.spm_sha256). "" for the copy task and emulated workers.
StatusOr<std::string> DescribePreparedCorpus(const proto::JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_BATCH_SOURCE_H_
