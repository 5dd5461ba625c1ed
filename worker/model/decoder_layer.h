// One decoder layer (docs/paper.md): causal self-attention, attention over the encoder output
// (queries from the decoder, keys and values from the encoder), then the feed-forward
// sub-layer, each wrapped in a ResidualNorm (post-LN or pre-LN).
#ifndef PSFORMER_WORKER_MODEL_DECODER_LAYER_H_
#define PSFORMER_WORKER_MODEL_DECODER_LAYER_H_

#include "common/proto/config.pb.h"
#include "worker/model/attention.h"
#include "worker/model/feed_forward.h"
#include "worker/model/residual_norm.h"

namespace psformer {

template <typename T>
class DecoderLayer {
 public:
  // index: 0..N-1 within the decoder.
  DecoderLayer(Backend<T>* backend, const ParamLayout& layout, const proto::ModelConfig& config, int index);

  // y: (batch*tgt_len, d); memory: (batch*src_len, d), the encoder output; tgt/src tokens
  // (batch, len) for the masks. All valid until Backward.
  const T* Forward(const T* params, const T* y, const int32_t* tgt_tokens, int tgt_len, const T* memory,
                   const int32_t* src_tokens, int src_len, int batch, const DropoutKey* key);
  // Returns dy (batch*tgt_len, d); adds the gradient w.r.t. memory to dmemory.
  const T* Backward(const T* params, const T* dout, T* dmemory, T* grad);

 private:
  Backend<T>* be_;
  int d_;
  int rows_ = 0;
  ResidualNorm<T> self_norm_, cross_norm_, ffn_norm_;
  MultiHeadAttention<T> self_attn_, cross_attn_;
  FeedForward<T> ffn_;
  DeviceBuffer<T> d_self_in_, d_cross_in_, d_ffn_in_;  // (rows, d)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_DECODER_LAYER_H_
