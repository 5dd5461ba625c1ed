#include "common/param_layout.h"

#include <algorithm>

#include "common/logging.h"

namespace psformer {

ParamLayout::ParamLayout(const proto::ModelConfig& model, int vocab_size) {
  const int64_t d = model.d_model();
  const int64_t f = model.d_ff();
  const bool pre_ln = model.norm_position() == proto::ModelConfig::PRE_LN;
  // The position-wise feed-forward sublayer, the same in encoder and decoder layers.
  auto add_feed_forward = [&](const std::string& prefix) {
    Add(prefix + "w1", d, f, ParamInit::kXavierUniform);
    Add(prefix + "b1", 1, f, ParamInit::kZeros);
    Add(prefix + "w2", f, d, ParamInit::kXavierUniform);
    Add(prefix + "b2", 1, d, ParamInit::kZeros);
  };
  Add("embedding", vocab_size, d, ParamInit::kEmbeddingNormal);
  for (int l = 0; l < model.layers(); ++l) {
    const std::string p = "encoder." + std::to_string(l) + ".";
    AddAttention(p + "self_attn.", d, /*fused_qkv=*/true);
    AddNorm(p + "ln1.", d);
    add_feed_forward(p + "ffn.");
    AddNorm(p + "ln2.", d);
  }
  if (pre_ln) AddNorm("encoder.final_ln.", d);
  for (int l = 0; l < model.layers(); ++l) {
    const std::string p = "decoder." + std::to_string(l) + ".";
    AddAttention(p + "self_attn.", d, /*fused_qkv=*/true);
    AddNorm(p + "ln1.", d);
    AddAttention(p + "cross_attn.", d, /*fused_qkv=*/false);
    AddNorm(p + "ln2.", d);
    add_feed_forward(p + "ffn.");
    AddNorm(p + "ln3.", d);
  }
  if (pre_ln) AddNorm("decoder.final_ln.", d);
}

void ParamLayout::Add(const std::string& name, int64_t rows, int64_t cols, ParamInit init) {
  tensors_.push_back({.name = name, .rows = rows, .cols = cols, .offset = total_, .init = init});
  total_ += tensors_.back().size();
}

void ParamLayout::AddAttention(const std::string& prefix, int64_t d, bool fused_qkv) {
  if (fused_qkv) {
    Add(prefix + "w_qkv", d, 3 * d, ParamInit::kXavierUniform);
    Add(prefix + "b_qkv", 1, 3 * d, ParamInit::kZeros);
  } else {
    Add(prefix + "w_q", d, d, ParamInit::kXavierUniform);
    Add(prefix + "b_q", 1, d, ParamInit::kZeros);
    Add(prefix + "w_kv", d, 2 * d, ParamInit::kXavierUniform);
    Add(prefix + "b_kv", 1, 2 * d, ParamInit::kZeros);
  }
  Add(prefix + "w_o", d, d, ParamInit::kXavierUniform);
  Add(prefix + "b_o", 1, d, ParamInit::kZeros);
}

void ParamLayout::AddNorm(const std::string& prefix, int64_t d) {
  Add(prefix + "gamma", 1, d, ParamInit::kOnes);
  Add(prefix + "beta", 1, d, ParamInit::kZeros);
}

const ParamTensor& ParamLayout::Get(const std::string& name) const {
  for (const ParamTensor& t : tensors_) {
    if (t.name == name) return t;
  }
  PSF_LOG(Error) << "no parameter tensor named " << name;
  PSF_CHECK(false && "unknown parameter tensor");
  return tensors_.front();
}

std::vector<uint64_t> ParamLayout::LayerStarts() const {
  const auto layer_of = [](const std::string& tensor) {
    const size_t first = tensor.find('.');
    if (first == std::string::npos) return tensor;
    const size_t second = tensor.find('.', first + 1);
    return second == std::string::npos ? tensor : tensor.substr(0, second + 1);
  };
  std::vector<uint64_t> starts;
  std::string layer;
  for (const ParamTensor& t : tensors_) {
    std::string of = layer_of(t.name);
    if (starts.empty() || of != layer) {
      starts.push_back(t.offset);
      layer = std::move(of);
    }
  }
  return starts;
}

ShardRange ShardOf(uint64_t total, int shards, int index) {
  PSF_CHECK(shards > 0 && index >= 0 && index < shards && static_cast<uint64_t>(shards) <= total);
  const uint64_t base = total / shards;
  const uint64_t extra = total % shards;
  const uint64_t i = static_cast<uint64_t>(index);
  ShardRange r;
  r.begin = i * base + std::min<uint64_t>(i, extra);
  r.end = r.begin + base + (i < extra ? 1 : 0);
  return r;
}

}  // namespace psformer
