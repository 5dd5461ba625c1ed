#include "common/memory_estimate.h"

#include <algorithm>

namespace psformer {
namespace {

// Unsigned 64-bit arithmetic that remembers whether any step wrapped around.
class Size {
 public:
  Size(uint64_t value = 0) : value_(value) {}  // NOLINT: sizes mix freely with integers.
  Size operator+(Size other) const {
    Size out;
    out.overflow_ = overflow_ || other.overflow_ || __builtin_add_overflow(value_, other.value_, &out.value_);
    return out;
  }
  Size operator*(Size other) const {
    Size out;
    out.overflow_ = overflow_ || other.overflow_ || __builtin_mul_overflow(value_, other.value_, &out.value_);
    return out;
  }
  bool overflow() const { return overflow_; }
  uint64_t value() const { return value_; }

 private:
  uint64_t value_ = 0;
  bool overflow_ = false;
};

uint64_t Positive(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }
uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

Size ParameterCount(const proto::ModelConfig& model, int vocab_size) {
  const Size d = Positive(model.d_model()), f = Positive(model.d_ff()), n = Positive(model.layers());
  // Per layer pair (common/param_layout.h): the encoder layer has 4d^2 + 2df + 9d + f, the decoder
  // layer 8d^2 + 2df + 15d + f; PRE_LN adds a final LayerNorm (2d) to each stack.
  const Size layers = n * (Size(12) * d * d + Size(4) * d * f + Size(24) * d + Size(2) * f);
  const Size final_norms = model.norm_position() == proto::ModelConfig::PRE_LN ? Size(4) * d : Size(0);
  return Size(Positive(vocab_size)) * d + layers + final_norms;
}

// Floats one worker's share of a step keeps for its backward pass: per token and layer the
// sub-layer inputs and outputs (about 10 d in an encoder layer, 16 d in a decoder layer), the
// feed-forward hidden layer and its ReLU (2 f), the attention probabilities and scores
// (2 heads x the longest sequence per attention), then the embeddings and the output logits.
Size ActivationFloats(const proto::JobConfig& c, int vocab_size, uint64_t workers) {
  const auto& m = c.model();
  const Size d = Positive(m.d_model()), f = Positive(m.d_ff()), h = Positive(m.heads());
  const uint64_t longest_data = c.data().task() == proto::DataConfig::COPY ? Positive(c.data().copy_max_length()) + 2
                                                                           : Positive(c.data().max_length()) + 2;
  const Size longest = std::min<uint64_t>(Positive(m.max_positions()), longest_data);
  const Size src = CeilDiv(Positive(c.batching().src_tokens_per_step()), workers);
  const Size tgt = CeilDiv(Positive(c.batching().tgt_tokens_per_step()), workers);
  const Size encoder = src * (Size(10) * d + Size(2) * f + Size(2) * h * longest);
  const Size decoder = tgt * (Size(16) * d + Size(2) * f + Size(4) * h * longest);
  const Size layers = Size(Positive(m.layers())) * (encoder + decoder);
  return layers + Size(2) * d * (src + tgt) + Size(2) * tgt * Size(Positive(vocab_size));
}

Status TooLarge(const proto::ModelConfig& m, const std::string& what) {
  return Status::InvalidArgument("model.d_model = " + std::to_string(m.d_model()) + ", model.d_ff = " +
                                 std::to_string(m.d_ff()) + ", model.layers = " + std::to_string(m.layers()) + ": " +
                                 what + " would not fit in 64 bits; no machine holds such a model");
}

}  // namespace

StatusOr<uint64_t> CountParameters(const proto::ModelConfig& model, int vocab_size) {
  const Size count = ParameterCount(model, vocab_size);
  if (count.overflow()) return TooLarge(model, "the parameter count");
  return count.value();
}

StatusOr<MemoryEstimate> EstimateMemory(const proto::JobConfig& c, int vocab_size) {
  const uint64_t workers = std::max<uint64_t>(1, Positive(c.cluster().workers()));
  const uint64_t servers = std::max<uint64_t>(1, Positive(c.cluster().servers()));
  const Size params = ParameterCount(c.model(), vocab_size);
  if (params.overflow()) return TooLarge(c.model(), "the parameter count");
  const uint64_t gradient_bytes = c.cluster().gradient_dtype() == proto::ClusterConfig::BF16 ? 2 : 4;
  const Size shard = CeilDiv(params.value(), servers);
  const Size server = shard * Size(4 * 4) + Size(workers) * shard * Size(gradient_bytes);
  const Size activations = ActivationFloats(c, vocab_size, workers) * Size(4);
  const Size worker_host = params * Size(2 * 4);
  const Size worker_compute = params * Size(2 * 4) + activations;
  const Size worker = worker_host + worker_compute;
  const Size local = params * Size(4 * 4) + ActivationFloats(c, vocab_size, 1) * Size(4);
  if (server.overflow() || worker.overflow() || local.overflow())
    return TooLarge(c.model(), "the memory of a role in bytes");
  MemoryEstimate e;
  e.parameters = params.value();
  e.server_bytes = server.value();
  e.worker_bytes = worker.value();
  e.worker_host_bytes = worker_host.value();
  e.worker_compute_bytes = worker_compute.value();
  e.worker_activation_bytes = activations.value();
  e.local_bytes = local.value();
  return e;
}

}  // namespace psformer
