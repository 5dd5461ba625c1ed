#include "worker/translate/incremental_decoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/logging.h"
#include "worker/data/batch.h"
#include "worker/model/feed_forward.h"
#include "worker/model/residual_norm.h"
#include "worker/translate/cached_cross_attention.h"
#include "worker/translate/incremental_self_attention.h"

namespace psformer {

// One decoder layer, step by step: DecoderLayer's sub-layers with cached attention. Dropout
// rates and sites are irrelevant (no key is ever passed), hence 0.
template <typename T>
struct IncrementalDecoder<T>::Layer {
  Layer(Backend<T>* be, const ParamLayout& layout, const proto::ModelConfig& config, int index)
      : prefix("decoder." + std::to_string(index) + "."),
        self_norm(be, layout, prefix + "ln1.", config.norm_position() == proto::ModelConfig::PRE_LN, 0.0f, 0),
        cross_norm(be, layout, prefix + "ln2.", config.norm_position() == proto::ModelConfig::PRE_LN, 0.0f, 0),
        ffn_norm(be, layout, prefix + "ln3.", config.norm_position() == proto::ModelConfig::PRE_LN, 0.0f, 0),
        self_attn(be, layout, prefix + "self_attn.", config.heads()),
        cross_attn(be, layout, prefix + "cross_attn.", config.heads()),
        ffn(be, layout, prefix + "ffn.", 0.0f, 0) {}

  // y: (rows, d) -> (rows, d).
  const T* Step(const T* params, const T* y, int rows, const int32_t* src_tokens) {
    const T* in = self_norm.SublayerInput(params, y, rows);
    const T* h1 = self_norm.Output(params, self_attn.Step(params, in, rows), nullptr);
    const T* in2 = cross_norm.SublayerInput(params, h1, rows);
    const T* h2 = cross_norm.Output(params, cross_attn.Step(params, in2, src_tokens), nullptr);
    const T* in3 = ffn_norm.SublayerInput(params, h2, rows);
    return ffn_norm.Output(params, ffn.Forward(params, in3, rows, nullptr), nullptr);
  }

  std::string prefix;
  ResidualNorm<T> self_norm, cross_norm, ffn_norm;
  IncrementalSelfAttention<T> self_attn;
  CachedCrossAttention<T> cross_attn;
  FeedForward<T> ffn;
};

template <typename T>
IncrementalDecoder<T>::IncrementalDecoder(const proto::ModelConfig& config, int vocab, Backend<T>* backend)
    : be_(backend),
      layout_(config, vocab),
      vocab_(vocab),
      d_(config.d_model()),
      max_positions_(config.max_positions()),
      pre_ln_(config.norm_position() == proto::ModelConfig::PRE_LN),
      embedding_(layout_.Get("embedding").offset),
      src_embedding_(backend, layout_, 0.0f, 0) {
  PSF_CHECK(config.heads() > 0 && d_ % config.heads() == 0 && vocab > kNumReservedIds);
  for (int l = 0; l < config.layers(); ++l) {
    encoder_.push_back(std::make_unique<EncoderLayer<T>>(backend, layout_, config, l));
    decoder_.push_back(std::make_unique<Layer>(backend, layout_, config, l));
  }
  if (pre_ln_) {
    encoder_final_ = std::make_unique<LayerNorm<T>>(backend, layout_, "encoder.final_ln.");
    decoder_final_ = std::make_unique<LayerNorm<T>>(backend, layout_, "decoder.final_ln.");
  }
  // The backend's own positional encodings (what training adds): looking up a zero row at
  // positions 0..max_positions-1 leaves PE(pos) alone.
  DeviceBuffer<T> zero_row = backend->template Allocate<T>(d_);
  DeviceBuffer<int32_t> zero_ids = backend->template Allocate<int32_t>(max_positions_);
  positions_ = backend->template Allocate<T>(static_cast<size_t>(max_positions_) * d_);
  backend->EmbeddingForward(max_positions_, d_, zero_row.data(), zero_ids.data(), T(1), max_positions_,
                            positions_.data());
  backend->Synchronize();
}

template <typename T>
IncrementalDecoder<T>::~IncrementalDecoder() = default;

template <typename T>
void IncrementalDecoder<T>::Start(const T* params, const std::vector<int32_t>& src, int rows, int src_len) {
  PSF_CHECK(rows > 0 && src_len > 0 && src_len <= max_positions_);
  PSF_CHECK(src.size() == static_cast<size_t>(rows) * src_len);
  params_ = params;
  rows_ = rows;
  src_len_ = src_len;
  steps_ = 0;
  src_host_ = src;
  Backend<T>* be = be_;
  src_.Reserve(be, src.size());
  src_.Upload(src.data(), src.size());
  const T* x = src_embedding_.Forward(params, src_.data(), rows, src_len, nullptr);
  for (auto& layer : encoder_) x = layer->Forward(params, x, src_.data(), rows, src_len, nullptr);
  if (pre_ln_) x = encoder_final_->Forward(params, x, rows * src_len);
  for (auto& layer : decoder_) {
    layer->self_attn.Reset();
    layer->cross_attn.Prepare(params, x, rows, src_len);
  }
}

template <typename T>
void IncrementalDecoder<T>::Step(const std::vector<int32_t>& tokens, std::vector<double>* log_probs) {
  PSF_CHECK(params_ != nullptr && steps_ < max_positions_);
  PSF_CHECK(tokens.size() == static_cast<size_t>(rows_));
  const int rows = rows_, d = d_, vocab = vocab_;
  log_probs->assign(static_cast<size_t>(rows) * vocab, 0.0);
  if (rows == 0) return;
  Backend<T>* be = be_;
  const T* params = params_;
  tokens_.Reserve(be, rows);
  tokens_.Upload(tokens.data(), rows);
  // sqrt(d) E[token] + PE(steps_), as Embedding computes it for this position.
  T* y0 = embedded_.Reserve(be, static_cast<size_t>(rows) * d);
  be->EmbeddingForward(rows, d, params + embedding_, tokens_.data(), static_cast<T>(std::sqrt(static_cast<double>(d))),
                       0, y0);
  be->BiasAdd(rows, d, positions_.data() + static_cast<size_t>(steps_) * d, y0);
  const T* y = y0;
  for (auto& layer : decoder_) y = layer->Step(params, y, rows, src_.data());
  if (pre_ln_) y = decoder_final_->Forward(params, y, rows);
  // logits (rows, V) = y (rows, d) E^T, as Transformer computes them.
  T* logits = logits_.Reserve(be, static_cast<size_t>(rows) * vocab);
  be->Gemm(Transpose::kNo, Transpose::kYes, rows, vocab, d, T(1), y, d, params + embedding_, d, T(0), logits, vocab);
  logits_host_.resize(static_cast<size_t>(rows) * vocab);
  logits_.Download(logits_host_.data(), logits_host_.size());
  ++steps_;
  for (int r = 0; r < rows; ++r) {
    const T* row = logits_host_.data() + static_cast<size_t>(r) * vocab;
    double* out = log_probs->data() + static_cast<size_t>(r) * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    const double log_sum = max + std::log(sum);
    for (int v = 0; v < vocab; ++v) out[v] = static_cast<double>(row[v]) - log_sum;
  }
}

template <typename T>
void IncrementalDecoder<T>::Reorder(const std::vector<int32_t>& parents) {
  const int new_rows = static_cast<int>(parents.size());
  for (int32_t p : parents) PSF_CHECK(p >= 0 && p < rows_);
  std::vector<int32_t> src(static_cast<size_t>(new_rows) * src_len_);
  for (int r = 0; r < new_rows; ++r) {
    std::copy_n(src_host_.begin() + static_cast<size_t>(parents[r]) * src_len_, src_len_,
                src.begin() + static_cast<size_t>(r) * src_len_);
  }
  src_host_ = std::move(src);
  Backend<T>* be = be_;
  if (new_rows > 0) {
    src_.Reserve(be, src_host_.size());
    src_.Upload(src_host_.data(), src_host_.size());
    // Entry t * new_rows + r picks position t of the old row parents[r] in the time-major cache.
    std::vector<int32_t> ids(static_cast<size_t>(steps_) * new_rows);
    for (int t = 0; t < steps_; ++t) {
      for (int r = 0; r < new_rows; ++r) ids[static_cast<size_t>(t) * new_rows + r] = t * rows_ + parents[r];
    }
    if (!ids.empty()) {
      gather_ids_.Reserve(be, ids.size());
      gather_ids_.Upload(ids.data(), ids.size());
    }
    parents_.Reserve(be, parents.size());
    parents_.Upload(parents.data(), parents.size());
  }
  for (auto& layer : decoder_) {
    layer->self_attn.Reorder(gather_ids_.data(), new_rows);
    layer->cross_attn.Reorder(parents_.data(), new_rows);
  }
  rows_ = new_rows;
}

template class IncrementalDecoder<float>;
template class IncrementalDecoder<double>;

}  // namespace psformer
