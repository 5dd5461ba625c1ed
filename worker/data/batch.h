// A training batch: padded token matrices for the encoder and the decoder.
// Shapes are row-major (sentences, positions). Every part of psformer that makes or consumes
// batches (data pipeline, model, worker loop, decoding) uses this one struct.
#ifndef PSFORMER_WORKER_DATA_BATCH_H_
#define PSFORMER_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <vector>

namespace psformer {

// Reserved ids of the shared vocabulary (SentencePiece is trained with these ids).
constexpr int32_t kPadId = 0;
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kUnkId = 3;
constexpr int32_t kNumReservedIds = 4;

struct Batch {
  int32_t sentences = 0;          // B
  int32_t src_len = 0;            // S: padded source length
  int32_t tgt_len = 0;            // T: padded target length
  std::vector<int32_t> src;       // (B, S): x1 .. xn eos, then pad
  std::vector<int32_t> tgt_in;    // (B, T): bos y1 .. ym, then pad   (decoder input)
  std::vector<int32_t> tgt_out;   // (B, T): y1 .. ym eos, then pad   (what the decoder predicts)
  int64_t src_tokens = 0;         // non-pad entries of src
  int64_t tgt_tokens = 0;         // non-pad entries of tgt_out: the loss is normalised by the step's total
  std::vector<int64_t> pair_ids;  // (B): index of each sentence pair in its corpus
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_BATCH_H_
