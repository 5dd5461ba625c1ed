// One encoder layer (docs/paper.md): self-attention, then the feed-forward sub-layer, each wrapped in
// a ResidualNorm (post-LN or pre-LN).
#ifndef PSFORMER_WORKER_MODEL_ENCODER_LAYER_H_
#define PSFORMER_WORKER_MODEL_ENCODER_LAYER_H_

#include "common/proto/config.pb.h"
#include "worker/model/attention.h"
#include "worker/model/feed_forward.h"
#include "worker/model/residual_norm.h"

namespace psformer {

template <typename T>
class EncoderLayer {
 public:
  EncoderLayer(Backend<T>* backend, const ParamLayout& layout, const proto::ModelConfig& config, int index);

  // x: (batch*len, d), tokens (batch, len) for the padding mask; both valid until Backward.
  const T* Forward(const T* params, const T* x, const int32_t* tokens, int batch, int len, const DropoutKey* key);
  // Returns dx (batch*len, d).
  const T* Backward(const T* params, const T* dy, T* grad);

 private:
  Backend<T>* be_;
  int d_;
  int rows_ = 0;
  ResidualNorm<T> attn_norm_, ffn_norm_;
  MultiHeadAttention<T> attn_;
  FeedForward<T> ffn_;
  DeviceBuffer<T> d_attn_in_, d_ffn_in_;  // (rows, d)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_ENCODER_LAYER_H_
