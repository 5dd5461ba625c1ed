#include "worker/data/batch_builder.h"

#include <algorithm>

namespace psformer {

PaddedSize PaddedBatchSize(const ParallelCorpus& corpus, std::span<const int64_t> pair_ids) {
  int64_t src_len = 0;
  int64_t tgt_len = 0;
  for (int64_t id : pair_ids) {
    src_len = std::max<int64_t>(src_len, corpus.src_length(id) + 1);
    tgt_len = std::max<int64_t>(tgt_len, corpus.tgt_length(id) + 1);
  }
  const auto n = static_cast<int64_t>(pair_ids.size());
  return PaddedSize{n * src_len, n * tgt_len};
}

Batch BuildBatch(const ParallelCorpus& corpus, std::span<const int64_t> pair_ids) {
  Batch batch;
  batch.sentences = static_cast<int32_t>(pair_ids.size());
  for (int64_t id : pair_ids) {
    batch.src_len = std::max(batch.src_len, corpus.src_length(id) + 1);
    batch.tgt_len = std::max(batch.tgt_len, corpus.tgt_length(id) + 1);
  }
  const int64_t S = batch.src_len;
  const int64_t T = batch.tgt_len;
  batch.src.assign(static_cast<size_t>(batch.sentences * S), kPadId);      // (B, S)
  batch.tgt_in.assign(static_cast<size_t>(batch.sentences * T), kPadId);   // (B, T)
  batch.tgt_out.assign(static_cast<size_t>(batch.sentences * T), kPadId);  // (B, T)
  batch.pair_ids.assign(pair_ids.begin(), pair_ids.end());
  for (int64_t row = 0; row < batch.sentences; ++row) {
    const int64_t id = pair_ids[row];
    const int32_t n = corpus.src_length(id);
    const int32_t m = corpus.tgt_length(id);
    int32_t* src = batch.src.data() + row * S;
    corpus.CopySrc(id, src);
    src[n] = kEosId;
    // Decoder input is the target shifted right by one behind bos; the output is the target
    // followed by eos. Copy once and shift rather than reading the corpus twice.
    int32_t* tgt_out = batch.tgt_out.data() + row * T;
    int32_t* tgt_in = batch.tgt_in.data() + row * T;
    corpus.CopyTgt(id, tgt_out);
    tgt_out[m] = kEosId;
    tgt_in[0] = kBosId;
    std::copy(tgt_out, tgt_out + m, tgt_in + 1);
    batch.src_tokens += n + 1;
    batch.tgt_tokens += m + 1;
  }
  return batch;
}

}  // namespace psformer
