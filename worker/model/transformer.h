// The encoder-decoder Transformer of docs/paper.md, written once against Backend<T>.
// Parameters are the flat vector of common/param_layout.h on the backend's device. The shared
// embedding E (V, d) is the source and target embedding and the pre-softmax projection
// (logits = y E^T, no bias). The loss is label-smoothed cross entropy (Backend::CrossEntropy),
// summed over non-pad target tokens.
//
// Activations for the backward live in buffers owned by the layers, reused across steps and
// grown only when a batch is larger than every batch before. Not thread-safe.
#ifndef PSFORMER_WORKER_MODEL_TRANSFORMER_H_
#define PSFORMER_WORKER_MODEL_TRANSFORMER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "worker/backend/backend.h"
#include "worker/data/batch.h"
#include "worker/model/decoder_layer.h"
#include "worker/model/embedding.h"
#include "worker/model/encoder_layer.h"
#include "worker/model/layer_norm.h"

namespace psformer {

struct StepStats {
  double loss_sum = 0;        // label-smoothed loss summed over target tokens
  double nll_sum = 0;         // negative log-likelihood summed over target tokens (Evaluate only)
  int64_t target_tokens = 0;  // non-pad entries of tgt_out
  int64_t correct = 0;        // target tokens whose argmax prediction is right
};

// Called by ForwardBackward as soon as the gradient of elements [begin, end) of the flat vector is
// final: per layer, in the order backward finishes them (decoder layers last to first, then the
// encoder's, the shared embedding last). The ranges are disjoint and together cover the vector.
// "Final" is in the backend's stream order: on a device the values may still be in flight, so a
// consumer reading them from the host or another stream synchronises first (an event, or
// Backend::Synchronize). This is where a push of the gradient can start before backward ends;
// `stats` are the batch's (the forward pass is over), which a push carries.
using GradientReady = std::function<void(uint64_t begin, uint64_t end, const StepStats& stats)>;

// Called by ForwardBackward before the first operation that reads elements [begin, end) of the
// parameters, per layer in forward order (the ranges of forward_ranges(), each once): where a
// worker makes its device wait for that layer's upload, so that forward starts on the first layer
// while the others are still being copied. Like GradientReady, it may enqueue work, never do it.
using ParamsNeeded = std::function<void(uint64_t begin, uint64_t end)>;

// The lookups' part of the embedding's gradient, kept apart from the output projection's
// (cluster.split_embedding): the rows of E the batch's tokens (source and target input) looked
// up, ascending and distinct, and their gradient, on the device.
template <typename T>
struct LookupRows {
  std::vector<int32_t> rows;
  // (rows.size(), d_model), valid until the next ForwardBackward; the buffer has room for every
  // row (vocab, d_model), and its address changes only if the model is made again.
  const T* values = nullptr;
};

// With LookupRows, the output projection's part of the embedding's gradient, dE = dlogits^T y, is
// computed and reported (GradientReady) in blocks of E's rows (cluster.output_projection_blocks),
// each as soon as it is done: backward's first product is the largest, and its pieces can be on
// their way while the rest of it runs (bench/link_schedule.py: at a link-bound step, 0.76 -> 0.84
// of the compute step with 8 blocks). The blocks of rows [first, second) of a vocabulary of
// `vocab` rows: min(blocks, vocab) near-equal runs, in order, covering [0, vocab), each beginning
// at a multiple of the largest power of two up to `max_align` rows that their size allows (the
// product then reads its operand from an aligned address: cuBLAS's fast kernels need 16 bytes;
// max_align 1 gives the unaligned blocks of before, for the GPU bench to compare).
std::vector<std::pair<int, int>> OutputProjectionBlocks(int vocab, int blocks, int max_align = 64);

template <typename T>
class Transformer {
 public:
  // REQUIRES: a validated config (d_model divisible by heads) and vocab > kNumReservedIds.
  Transformer(const proto::ModelConfig& config, int vocab, Backend<T>* backend);

  const ParamLayout& layout() const { return layout_; }
  uint64_t parameter_count() const { return layout_.total_size(); }

  // Forward and backward of one batch with dropout keyed by `key`. grad (same layout as params,
  // device memory) is overwritten with the gradient of the SUMMED token loss (servers sum workers'
  // gradients, then divide by the step's tokens). An empty batch gives zero stats and gradient.
  // REQUIRES: src_len and tgt_len <= max_positions (callers validate batches first).
  // `ready`, if set, hears of each layer's gradient as it is finished (GradientReady); `need`, if
  // set, of each layer's parameters before they are first read (ParamsNeeded).
  // With `lookups`, the embedding's range of grad holds only the output projection's part, which
  // `ready` hears of first, block by block of rows (OutputProjectionBlocks) as each is final; the
  // lookups' part is in *lookups at the end.
  // Their sum is the gradient without `lookups` (in another order of additions).
  StepStats ForwardBackward(const T* params, const Batch& batch, const DropoutKey& key, T* grad,
                            const GradientReady& ready = nullptr, const ParamsNeeded& need = nullptr,
                            LookupRows<T>* lookups = nullptr);
  // The blocks a ForwardBackward with LookupRows makes dE in (OutputProjectionBlocks); 1 at first.
  void set_output_projection_blocks(int blocks, int max_align = 64) {
    output_projection_blocks_ = blocks;
    output_projection_align_ = max_align;
  }
  // The layers' ranges of the flat vector in the order forward first reads them (the embedding,
  // the encoder's layers, its final norm, the decoder's, its final norm): disjoint, covering it.
  std::vector<std::pair<uint64_t, uint64_t>> forward_ranges() const;
  // Forward only, without dropout; correct counts argmax hits (teacher forcing).
  StepStats Evaluate(const T* params, const Batch& batch);
  // The logits (tgt rows, vocab) of the last Forward/Evaluate, on the device.
  const T* logits() const { return logits_.data(); }

 private:
  StepStats Forward(const T* params, const Batch& batch, const DropoutKey* key, bool want_gradient,
                    const ParamsNeeded* need = nullptr);
  // The batch's distinct source and target-input ids, ascending; row_of_ maps each to its index.
  std::vector<int32_t> BatchRows(const Batch& batch);
  // Each token's row index (row_of_) into `out`, on the device; returns out's data.
  const int32_t* UploadRowIds(const std::vector<int32_t>& tokens, DeviceBuffer<int32_t>* out);

  Backend<T>* be_;
  proto::ModelConfig config_;
  ParamLayout layout_;
  int vocab_;
  int d_;
  bool pre_ln_;
  uint64_t embedding_;  // offset of E
  int output_projection_blocks_ = 1;
  int output_projection_align_ = 64;  // (OutputProjectionBlocks' max_align)
  Embedding<T> src_embedding_, tgt_embedding_;
  std::vector<std::unique_ptr<EncoderLayer<T>>> encoder_;
  std::vector<std::unique_ptr<DecoderLayer<T>>> decoder_;
  std::unique_ptr<LayerNorm<T>> encoder_final_, decoder_final_;  // PRE_LN only
  // The flat-vector ranges GradientReady reports: each layer's, each final norm's (PRE_LN), and
  // the embedding's.
  using Range = std::pair<uint64_t, uint64_t>;
  std::vector<Range> encoder_ranges_, decoder_ranges_;
  Range encoder_final_range_{0, 0}, decoder_final_range_{0, 0}, embedding_range_{0, 0};

  // Per-batch state.
  int batch_ = 0, src_len_ = 0, tgt_len_ = 0;
  DeviceBuffer<int32_t> src_, tgt_in_, tgt_out_;  // (B, S), (B, T), (B, T)
  const T* memory_ = nullptr;                     // (B*S, d) encoder output
  const T* decoder_out_ = nullptr;                // (B*T, d)
  DeviceBuffer<T> logits_;                        // (B*T, V); the gradient after ForwardBackward
  DeviceBuffer<T> token_loss_, token_correct_;    // (B*T)
  DeviceBuffer<T> ddecoder_out_, dmemory_;        // (B*T, d), (B*S, d)
  DeviceBuffer<T> dfinal_;                        // (max(B*S, B*T), d)
  // With LookupRows: per token, its row in LookupRows::rows; the rows' gradient.
  DeviceBuffer<int32_t> src_rows_, tgt_rows_;  // (B, S), (B, T)
  DeviceBuffer<T> rows_grad_;                  // (rows, d), of room (vocab, d)
  std::vector<int32_t> row_of_;                // (vocab) host scratch
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_TRANSFORMER_H_
