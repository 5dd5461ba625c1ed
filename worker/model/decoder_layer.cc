#include "worker/model/decoder_layer.h"

#include <string>

#include "worker/model/dropout_sites.h"

namespace psformer {

template <typename T>
DecoderLayer<T>::DecoderLayer(Backend<T>* backend, const ParamLayout& layout, const proto::ModelConfig& config,
                              int index)
    : be_(backend),
      d_(config.d_model()),
      self_norm_(backend, layout, "decoder." + std::to_string(index) + ".ln1.",
                 config.norm_position() == proto::ModelConfig::PRE_LN, config.dropout(),
                 LayerSite(config.layers() + index, kSiteSelfAttnOut)),
      cross_norm_(backend, layout, "decoder." + std::to_string(index) + ".ln2.",
                  config.norm_position() == proto::ModelConfig::PRE_LN, config.dropout(),
                  LayerSite(config.layers() + index, kSiteCrossAttnOut)),
      ffn_norm_(backend, layout, "decoder." + std::to_string(index) + ".ln3.",
                config.norm_position() == proto::ModelConfig::PRE_LN, config.dropout(),
                LayerSite(config.layers() + index, kSiteFfnOut)),
      self_attn_(backend, layout, "decoder." + std::to_string(index) + ".self_attn.", AttentionKind::kCausalSelf,
                 config.heads(), config.attention_dropout(), LayerSite(config.layers() + index, kSiteSelfAttnProbs)),
      cross_attn_(backend, layout, "decoder." + std::to_string(index) + ".cross_attn.", AttentionKind::kCross,
                  config.heads(), config.attention_dropout(), LayerSite(config.layers() + index, kSiteCrossAttnProbs)),
      ffn_(backend, layout, "decoder." + std::to_string(index) + ".ffn.", config.relu_dropout(),
           LayerSite(config.layers() + index, kSiteFfnRelu)) {}

template <typename T>
const T* DecoderLayer<T>::Forward(const T* params, const T* y, const int32_t* tgt_tokens, int tgt_len, const T* memory,
                                  const int32_t* src_tokens, int src_len, int batch, const DropoutKey* key) {
  rows_ = batch * tgt_len;
  const T* in = self_norm_.SublayerInput(params, y, rows_);
  const T* h1 =
      self_norm_.Output(params, self_attn_.Forward(params, in, in, batch, tgt_len, tgt_len, tgt_tokens, key), key);
  const T* in2 = cross_norm_.SublayerInput(params, h1, rows_);
  const T* h2 = cross_norm_.Output(
      params, cross_attn_.Forward(params, in2, memory, batch, tgt_len, src_len, src_tokens, key), key);
  const T* in3 = ffn_norm_.SublayerInput(params, h2, rows_);
  return ffn_norm_.Output(params, ffn_.Forward(params, in3, rows_, key), key);
}

template <typename T>
const T* DecoderLayer<T>::Backward(const T* params, const T* dout, T* dmemory, T* grad) {
  const size_t n = static_cast<size_t>(rows_) * d_;
  T* d_ffn_in = d_ffn_in_.Reserve(be_, n);
  ffn_.Backward(params, ffn_norm_.OutputBackward(params, dout, grad), d_ffn_in, grad);
  const T* dh2 = ffn_norm_.InputBackward(params, d_ffn_in, grad);
  T* d_cross_in = d_cross_in_.Reserve(be_, n);
  cross_attn_.Backward(params, cross_norm_.OutputBackward(params, dh2, grad), d_cross_in, dmemory, grad);
  const T* dh1 = cross_norm_.InputBackward(params, d_cross_in, grad);
  T* d_self_in = d_self_in_.Reserve(be_, n);
  self_attn_.Backward(params, self_norm_.OutputBackward(params, dh1, grad), d_self_in, nullptr, grad);
  return self_norm_.InputBackward(params, d_self_in, grad);
}

template class DecoderLayer<float>;
template class DecoderLayer<double>;

}  // namespace psformer
