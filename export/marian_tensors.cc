#include "export/marian_tensors.h"

#include <cmath>
#include <string>

#include "common/param_layout.h"

namespace psformer {
namespace {

// Reads psformer's tensors by name and appends them, converted, to `out`.
class MarianTensorBuilder {
 public:
  MarianTensorBuilder(const ModelFile& model, std::vector<NamedTensor>* out)
      : params_(model.params.data()),
        layout_(model.model, model.vocab_size),
        order_(ModelDimensionOrder(model.model.d_model())),
        d_(model.model.d_model()),
        out_(out) {}

  // Columns [first, first + count) of psformer's (in, out) matrix `from` as an (count, in)
  // nn.Linear weight; `residual_in` / `residual_out` say which side is the model dimension.
  void Linear(const std::string& to, const std::string& from, int64_t first, int64_t count, bool residual_in,
              bool residual_out) {
    const ParamTensor& w = layout_.Get(from);
    NamedTensor t{to + ".weight", {count, w.rows}, std::vector<float>(count * w.rows)};
    for (int64_t o = 0; o < count; ++o) {
      const int64_t col = first + (residual_out ? order_[o] : o);
      for (int64_t i = 0; i < w.rows; ++i) {
        const int64_t row = residual_in ? order_[i] : i;
        t.values[o * w.rows + i] = params_[w.offset + row * w.cols + col];
      }
    }
    out_->push_back(std::move(t));
  }

  // Elements [first, first + count) of the vector `from`, permuted when it is in the model dimension.
  void Vector(const std::string& to, const std::string& from, int64_t first, int64_t count, bool residual) {
    const ParamTensor& v = layout_.Get(from);
    NamedTensor t{to, {count}, std::vector<float>(count)};
    for (int64_t j = 0; j < count; ++j) t.values[j] = params_[v.offset + first + (residual ? order_[j] : j)];
    out_->push_back(std::move(t));
  }

  // A projection `from`.w_X / b_X (or a block of a fused one) as `to`.{weight,bias}.
  void Projection(const std::string& to, const std::string& w, const std::string& b, int64_t block, bool residual_out) {
    Linear(to, w, block * d_, d_, !residual_out, residual_out);
    Vector(to + ".bias", b, block * d_, d_, residual_out);
  }

  void Norm(const std::string& to, const std::string& from) {
    Vector(to + ".weight", from + "gamma", 0, d_, true);
    Vector(to + ".bias", from + "beta", 0, d_, true);
  }

  void FeedForward(const std::string& to, const std::string& from) {
    const int64_t f = layout_.Get(from + "w1").cols;
    Linear(to + "fc1", from + "w1", 0, f, true, false);
    Vector(to + "fc1.bias", from + "b1", 0, f, false);
    Linear(to + "fc2", from + "w2", 0, d_, false, true);
    Vector(to + "fc2.bias", from + "b2", 0, d_, true);
  }

  // Self-attention with psformer's fused [Q | K | V] projection.
  void SelfAttention(const std::string& to, const std::string& from) {
    Projection(to + "q_proj", from + "w_qkv", from + "b_qkv", 0, false);
    Projection(to + "k_proj", from + "w_qkv", from + "b_qkv", 1, false);
    Projection(to + "v_proj", from + "w_qkv", from + "b_qkv", 2, false);
    Projection(to + "out_proj", from + "w_o", from + "b_o", 0, true);
  }

  // Cross-attention: queries from the decoder, fused [K | V] from the encoder's output.
  void CrossAttention(const std::string& to, const std::string& from) {
    Projection(to + "q_proj", from + "w_q", from + "b_q", 0, false);
    Projection(to + "k_proj", from + "w_kv", from + "b_kv", 0, false);
    Projection(to + "v_proj", from + "w_kv", from + "b_kv", 1, false);
    Projection(to + "out_proj", from + "w_o", from + "b_o", 0, true);
  }

  void Embedding(const std::string& to) {
    const ParamTensor& e = layout_.Get("embedding");
    NamedTensor t{to, {e.rows, e.cols}, std::vector<float>(e.size())};
    for (int64_t v = 0; v < e.rows; ++v) {
      for (int64_t j = 0; j < d_; ++j) t.values[v * d_ + j] = params_[e.offset + v * d_ + order_[j]];
    }
    out_->push_back(std::move(t));
  }

  // The sinusoids psformer adds (CpuBackend::PositionalEncoding's formula, computed in double and
  // rounded to float as it does), in transformers' order.
  void Positions(const std::string& to, int64_t positions) {
    NamedTensor t{to, {positions, d_}, std::vector<float>(positions * d_)};
    for (int64_t pos = 0; pos < positions; ++pos) {
      for (int64_t j = 0; j < d_; ++j) {
        const int i = order_[j];
        const double angle = pos / std::pow(10000.0, static_cast<double>(i - i % 2) / d_);
        t.values[pos * d_ + j] = static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
    out_->push_back(std::move(t));
  }

 private:
  const float* params_;
  ParamLayout layout_;
  std::vector<int> order_;
  int64_t d_;
  std::vector<NamedTensor>* out_;
};

}  // namespace

std::vector<int> ModelDimensionOrder(int d) {
  std::vector<int> order(d);
  for (int k = 0; k < d / 2; ++k) {
    order[k] = 2 * k;
    order[d / 2 + k] = 2 * k + 1;
  }
  return order;
}

ExportArchitecture ArchitectureOf(const ModelFile& model) {
  return model.model.norm_position() == proto::ModelConfig::PRE_LN ? ExportArchitecture::kPegasus
                                                                   : ExportArchitecture::kMarian;
}

const char* ArchitectureName(ExportArchitecture architecture) {
  return architecture == ExportArchitecture::kPegasus ? "PegasusForConditionalGeneration" : "MarianMTModel";
}

Status CheckExportable(const ModelFile& model) {
  const proto::ModelConfig& m = model.model;
  if (m.d_model() % 2 != 0) {
    return Status::InvalidArgument("d_model " + std::to_string(m.d_model()) +
                                   " is odd; the sinusoids of an export need an even d_model");
  }
  if (m.heads() <= 0 || m.d_model() % m.heads() != 0) {
    return Status::InvalidArgument("heads " + std::to_string(m.heads()) + " do not divide d_model " +
                                   std::to_string(m.d_model()));
  }
  if (m.max_positions() <= 0) return Status::InvalidArgument("max_positions must be positive");
  if (model.params.size() != ParamLayout(m, model.vocab_size).total_size()) {
    return Status::InvalidArgument("the model holds " + std::to_string(model.params.size()) + " parameters, not the " +
                                   std::to_string(ParamLayout(m, model.vocab_size).total_size()) + " its config needs");
  }
  return Status::Ok();
}

std::vector<NamedTensor> MarianTensors(const ModelFile& model) {
  std::vector<NamedTensor> out;
  MarianTensorBuilder b(model, &out);
  b.Embedding("model.shared.weight");
  b.Positions("model.encoder.embed_positions.weight", model.model.max_positions());
  b.Positions("model.decoder.embed_positions.weight", model.model.max_positions());
  for (int l = 0; l < model.model.layers(); ++l) {
    const std::string to = "model.encoder.layers." + std::to_string(l) + ".";
    const std::string from = "encoder." + std::to_string(l) + ".";
    b.SelfAttention(to + "self_attn.", from + "self_attn.");
    b.Norm(to + "self_attn_layer_norm", from + "ln1.");
    b.FeedForward(to, from + "ffn.");
    b.Norm(to + "final_layer_norm", from + "ln2.");
  }
  for (int l = 0; l < model.model.layers(); ++l) {
    const std::string to = "model.decoder.layers." + std::to_string(l) + ".";
    const std::string from = "decoder." + std::to_string(l) + ".";
    b.SelfAttention(to + "self_attn.", from + "self_attn.");
    b.Norm(to + "self_attn_layer_norm", from + "ln1.");
    b.CrossAttention(to + "encoder_attn.", from + "cross_attn.");
    b.Norm(to + "encoder_attn_layer_norm", from + "ln2.");
    b.FeedForward(to, from + "ffn.");
    b.Norm(to + "final_layer_norm", from + "ln3.");
  }
  if (ArchitectureOf(model) == ExportArchitecture::kPegasus) {
    b.Norm("model.encoder.layer_norm", "encoder.final_ln.");
    b.Norm("model.decoder.layer_norm", "decoder.final_ln.");
  }
  out.push_back(NamedTensor{"final_logits_bias", {1, model.vocab_size}, std::vector<float>(model.vocab_size, 0.f)});
  return out;
}

}  // namespace psformer
