// The flat parameter vector: every parameter of the model in one fp32 array, in a fixed,
// documented order, so that workers, servers, checkpoints and model files agree on offsets.
//
// Order (N = model.layers, d = d_model, f = d_ff, V = vocab):
//   embedding                              (V, d)   shared: source, target, pre-softmax
//   encoder.L.self_attn.{w_qkv (d,3d), b_qkv (3d), w_o (d,d), b_o (d)}
//   encoder.L.ln1.{gamma (d), beta (d)}
//   encoder.L.ffn.{w1 (d,f), b1 (f), w2 (f,d), b2 (d)}
//   encoder.L.ln2.{gamma, beta}                              for L = 0..N-1
//   encoder.final_ln.{gamma, beta}                           PRE_LN only
//   decoder.L.self_attn.{w_qkv, b_qkv, w_o, b_o}, decoder.L.ln1.{gamma, beta}
//   decoder.L.cross_attn.{w_q (d,d), b_q (d), w_kv (d,2d), b_kv (2d), w_o, b_o}
//   decoder.L.ln2.{gamma, beta}
//   decoder.L.ffn.{w1, b1, w2, b2}, decoder.L.ln3.{gamma, beta}  for L = 0..N-1
//   decoder.final_ln.{gamma, beta}                           PRE_LN only
// Matrices are row-major (in, out): y = x W + b. In w_qkv the columns are [Q | K | V], each
// split into heads of d/h consecutive columns; w_kv likewise [K | V].
#ifndef PSFORMER_COMMON_PARAM_LAYOUT_H_
#define PSFORMER_COMMON_PARAM_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"

namespace psformer {

// How a tensor is initialised (by the model; listed here so the layout says it all).
enum class ParamInit {
  kXavierUniform,    // U(-a, a), a = sqrt(6 / (rows + cols)): projections.
  kEmbeddingNormal,  // N(0, d_model^-0.5): the shared embedding (it is scaled by sqrt(d_model)).
  kZeros,            // biases, LayerNorm beta.
  kOnes,             // LayerNorm gamma.
};

struct ParamTensor {
  std::string name;
  int64_t rows = 0;  // 1 for vectors.
  int64_t cols = 0;
  uint64_t offset = 0;  // first element in the flat vector.
  ParamInit init = ParamInit::kZeros;
  uint64_t size() const { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols); }
};

class ParamLayout {
 public:
  ParamLayout(const proto::ModelConfig& model, int vocab_size);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  uint64_t total_size() const { return total_; }
  // The tensor with this name; aborts if there is none (names are fixed by this file).
  const ParamTensor& Get(const std::string& name) const;
  // Where each layer begins, ascending, from 0: the embedding, each encoder and decoder layer, each
  // final norm (PRE_LN). A layer is the run of tensors whose names share the part up to the second
  // dot ("decoder.3.", "encoder.final_ln."): the ranges backward finishes one at a time.
  std::vector<uint64_t> LayerStarts() const;

 private:
  void Add(const std::string& name, int64_t rows, int64_t cols, ParamInit init);
  void AddAttention(const std::string& prefix, int64_t d, bool fused_qkv);
  void AddNorm(const std::string& prefix, int64_t d);
  std::vector<ParamTensor> tensors_;
  uint64_t total_ = 0;
};

// Element range [begin, end) of shard `index` of `shards` over `total` elements: contiguous,
// sizes differ by at most one. REQUIRES: 0 <= index < shards <= total.
struct ShardRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};
ShardRange ShardOf(uint64_t total, int shards, int index);

}  // namespace psformer

#endif  // PSFORMER_COMMON_PARAM_LAYOUT_H_
