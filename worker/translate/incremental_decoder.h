// The Transformer of worker/model for inference: the source batch is encoded once, each decoder
// layer keeps its cross-attention keys/values (CachedCrossAttention) and its self-attention
// keys/values of earlier positions (IncrementalSelfAttention), and every Step feeds one new token
// per row and returns the next-token log-probabilities. Rows are hypotheses: Start gives one per
// sentence, Reorder keeps, copies and drops them as beam search needs.
//
// Same parameters (flat vector, common/param_layout.h) and, up to floating-point summation order,
// the same function as Transformer<T>::Evaluate with teacher forcing: row r's log-probabilities
// at step t are log_softmax of the logits Evaluate gives for its position t.
// Encoder layers, LayerNorms, residual connections and feed-forward layers are the model's own
// classes, run without dropout. Not thread-safe.
#ifndef PSFORMER_WORKER_TRANSLATE_INCREMENTAL_DECODER_H_
#define PSFORMER_WORKER_TRANSLATE_INCREMENTAL_DECODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "worker/backend/backend.h"
#include "worker/model/embedding.h"
#include "worker/model/encoder_layer.h"
#include "worker/model/layer_norm.h"

namespace psformer {

template <typename T>
class IncrementalDecoder {
 public:
  // REQUIRES: a validated config and vocab > kNumReservedIds (as Transformer).
  IncrementalDecoder(const proto::ModelConfig& config, int vocab, Backend<T>* backend);
  ~IncrementalDecoder();

  const ParamLayout& layout() const { return layout_; }
  int vocab() const { return vocab_; }
  // Decoder positions available: Step may be called this many times after Start.
  int max_steps() const { return max_positions_; }

  // src: (rows, src_len) host ids, each row "x1 .. xn eos" then pad (worker/data/batch.h).
  // Runs the encoder and prepares every layer's cross-attention; the decoder starts empty with
  // one row per sentence. params: the flat vector on the device, valid until the next Start.
  // REQUIRES: rows > 0, 0 < src_len <= max_steps(), ids in [0, vocab).
  void Start(const T* params, const std::vector<int32_t>& src, int rows, int src_len);
  // tokens: (rows()) host ids, each row's decoder input at position steps() (bos first).
  // log_probs (rows(), vocab) receives log_softmax of the next-token logits, computed in double.
  // REQUIRES: steps() < max_steps().
  void Step(const std::vector<int32_t>& tokens, std::vector<double>* log_probs);
  // Row r becomes old row parents[r] (its cache, its sentence); parents may repeat or skip rows.
  void Reorder(const std::vector<int32_t>& parents);

  int rows() const { return rows_; }
  int steps() const { return steps_; }

 private:
  struct Layer;

  Backend<T>* be_;
  ParamLayout layout_;
  int vocab_, d_, max_positions_;
  bool pre_ln_;
  uint64_t embedding_;  // offset of E
  Embedding<T> src_embedding_;
  std::vector<std::unique_ptr<EncoderLayer<T>>> encoder_;
  std::vector<std::unique_ptr<Layer>> decoder_;
  std::unique_ptr<LayerNorm<T>> encoder_final_, decoder_final_;  // PRE_LN only

  const T* params_ = nullptr;
  int rows_ = 0, src_len_ = 0, steps_ = 0;
  std::vector<int32_t> src_host_;     // (rows, src_len)
  DeviceBuffer<int32_t> src_;         // (rows, src_len)
  DeviceBuffer<T> positions_;         // (max_positions, d): PE(pos), from the backend
  DeviceBuffer<int32_t> tokens_;      // (rows)
  DeviceBuffer<int32_t> gather_ids_;  // (steps * rows) for the self-attention caches
  DeviceBuffer<int32_t> parents_;     // (rows)
  DeviceBuffer<T> embedded_;          // (rows, d)
  DeviceBuffer<T> logits_;            // (rows, vocab)
  std::vector<T> logits_host_;        // (rows, vocab)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_INCREMENTAL_DECODER_H_
