// Turns chosen sentence pairs into the padded Batch layout of batch.h.
#ifndef PSFORMER_WORKER_DATA_BATCH_BUILDER_H_
#define PSFORMER_WORKER_DATA_BATCH_BUILDER_H_

#include <cstdint>
#include <span>

#include "worker/data/batch.h"
#include "worker/data/parallel_corpus.h"

namespace psformer {

// One row per id, in the given order: src = x.. eos, tgt_in = bos y.., tgt_out = y.. eos, then
// kPadId up to the longest row of each side (S = max source length + 1, T = max target
// length + 1). No ids gives the empty batch (sentences = 0, every length 0).
// REQUIRES: every id is a pair of `corpus`.
Batch BuildBatch(const ParallelCorpus& corpus, std::span<const int64_t> pair_ids);

// Padded token counts of a batch of these pairs: sentences x padded length per side.
struct PaddedSize {
  int64_t src = 0;
  int64_t tgt = 0;
};
PaddedSize PaddedBatchSize(const ParallelCorpus& corpus, std::span<const int64_t> pair_ids);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_BATCH_BUILDER_H_
