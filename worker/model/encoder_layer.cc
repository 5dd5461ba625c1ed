#include "worker/model/encoder_layer.h"

#include <string>

#include "worker/model/dropout_sites.h"

namespace psformer {

template <typename T>
EncoderLayer<T>::EncoderLayer(Backend<T>* backend, const ParamLayout& layout, const proto::ModelConfig& config,
                              int index)
    : be_(backend),
      d_(config.d_model()),
      attn_norm_(backend, layout, "encoder." + std::to_string(index) + ".ln1.",
                 config.norm_position() == proto::ModelConfig::PRE_LN, config.dropout(),
                 LayerSite(index, kSiteSelfAttnOut)),
      ffn_norm_(backend, layout, "encoder." + std::to_string(index) + ".ln2.",
                config.norm_position() == proto::ModelConfig::PRE_LN, config.dropout(), LayerSite(index, kSiteFfnOut)),
      attn_(backend, layout, "encoder." + std::to_string(index) + ".self_attn.", AttentionKind::kSelf, config.heads(),
            config.attention_dropout(), LayerSite(index, kSiteSelfAttnProbs)),
      ffn_(backend, layout, "encoder." + std::to_string(index) + ".ffn.", config.relu_dropout(),
           LayerSite(index, kSiteFfnRelu)) {}

template <typename T>
const T* EncoderLayer<T>::Forward(const T* params, const T* x, const int32_t* tokens, int batch, int len,
                                  const DropoutKey* key) {
  rows_ = batch * len;
  const T* in = attn_norm_.SublayerInput(params, x, rows_);
  const T* h = attn_norm_.Output(params, attn_.Forward(params, in, in, batch, len, len, tokens, key), key);
  const T* in2 = ffn_norm_.SublayerInput(params, h, rows_);
  return ffn_norm_.Output(params, ffn_.Forward(params, in2, rows_, key), key);
}

template <typename T>
const T* EncoderLayer<T>::Backward(const T* params, const T* dy, T* grad) {
  const size_t n = static_cast<size_t>(rows_) * d_;
  T* d_ffn_in = d_ffn_in_.Reserve(be_, n);
  ffn_.Backward(params, ffn_norm_.OutputBackward(params, dy, grad), d_ffn_in, grad);
  const T* dh = ffn_norm_.InputBackward(params, d_ffn_in, grad);
  T* d_attn_in = d_attn_in_.Reserve(be_, n);
  attn_.Backward(params, attn_norm_.OutputBackward(params, dh, grad), d_attn_in, nullptr, grad);
  return attn_norm_.InputBackward(params, d_attn_in, grad);
}

template class EncoderLayer<float>;
template class EncoderLayer<double>;

}  // namespace psformer
