// Gradient checks: every layer's and the whole model's analytic backward against central finite
// differences, in double precision on the CPU backend, on random shapes with padding and odd
// lengths, post-LN and pre-LN, with dropout (masks are fixed by their Philox key, so the function
// being differentiated is deterministic).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <string>

#include "tests/model_test_util.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/attention.h"
#include "worker/model/decoder_layer.h"
#include "worker/model/embedding.h"
#include "worker/model/encoder_layer.h"
#include "worker/model/feed_forward.h"
#include "worker/model/layer_norm.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

using testing::AllIndices;
using testing::MaxGradientError;
using testing::RandomBatch;
using testing::RandomParams;
using testing::SmallModel;
using Vec = std::vector<double>;

constexpr int kVocab = 11;
const DropoutKey kKey{1234, 7, 1};

Vec RandomVec(std::mt19937_64& rng, size_t n) {
  Vec v(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : v) x = normal(rng);
  return v;
}

double Dot(const double* a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

// Indices of every parameter whose tensor name starts with `prefix`.
std::vector<size_t> ParamIndices(const ParamLayout& layout, const std::string& prefix) {
  std::vector<size_t> v;
  for (const ParamTensor& t : layout.tensors()) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    for (uint64_t i = 0; i < t.size(); ++i) v.push_back(t.offset + i);
  }
  return v;
}

// `config` with attention and ReLU dropout too, so that every dropout site is differentiated.
proto::ModelConfig WithEveryDropout(proto::ModelConfig config) {
  config.set_attention_dropout(0.1f);
  config.set_relu_dropout(0.1f);
  return config;
}

struct AttentionCase {
  AttentionKind kind;
  float probs_dropout;
};

class GradAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(GradAttention, MatchesFiniteDifferences) {
  const AttentionCase c = GetParam();
  std::mt19937_64 rng(11 + static_cast<int>(c.kind));
  CpuBackend<double> be(2);
  const auto config = SmallModel(1, 8, 12, 2, false, 0.0f);
  ParamLayout layout(config, kVocab);
  const bool cross = c.kind == AttentionKind::kCross;
  const std::string prefix = cross ? "decoder.0.cross_attn." : "encoder.0.self_attn.";
  const int batch = 3, queries = 5, keys = cross ? 4 : 5;
  const Batch tokens = RandomBatch(rng, batch, keys, queries, kVocab);
  const std::vector<int32_t>& key_tokens = tokens.src;  // (batch, keys) with padding
  Vec params = RandomParams(layout, rng);
  Vec x = RandomVec(rng, batch * queries * 8), memory = RandomVec(rng, batch * keys * 8);
  const Vec r = RandomVec(rng, batch * queries * 8);
  MultiHeadAttention<double> attn(&be, layout, prefix, c.kind, 2, c.probs_dropout, 99);
  auto loss = [&] {
    const double* out = attn.Forward(params.data(), x.data(), cross ? memory.data() : x.data(), batch, queries, keys,
                                     key_tokens.data(), &kKey);
    return Dot(out, r);
  };
  loss();
  Vec grad(params.size(), 0.0), dx(x.size()), dmemory(memory.size(), 0.0);
  attn.Backward(params.data(), r.data(), dx.data(), dmemory.data(), grad.data());
  MaxGradientError("params", &params, grad, ParamIndices(layout, prefix), loss);
  MaxGradientError("x", &x, dx, AllIndices(x.size()), loss);
  if (cross) MaxGradientError("memory", &memory, dmemory, AllIndices(memory.size()), loss);
}

INSTANTIATE_TEST_SUITE_P(Kinds, GradAttention,
                         ::testing::Values(AttentionCase{AttentionKind::kSelf, 0.0f},
                                           AttentionCase{AttentionKind::kCausalSelf, 0.0f},
                                           AttentionCase{AttentionKind::kCross, 0.0f},
                                           AttentionCase{AttentionKind::kCausalSelf, 0.3f}),
                         [](const auto& info) {
                           const AttentionKind kind = info.param.kind;
                           const std::string name = kind == AttentionKind::kSelf         ? "Self"
                                                    : kind == AttentionKind::kCausalSelf ? "CausalSelf"
                                                                                         : "Cross";
                           return info.param.probs_dropout > 0 ? name + "WithDropout" : name;
                         });

// A sub-layer from (rows, 8) to (rows, 8) whose parameters are the tensors under `prefix`:
// analytic gradients of a random projection of its output against finite differences, for its
// parameters and its input. make(backend, layout) builds it; forward(layer, params, x, rows)
// returns its output; layer.Backward(params, dy, dx, grad) accumulates into grad.
template <typename Make, typename Forward>
void CheckRowSublayer(uint64_t seed, const std::string& prefix, int rows, Make make, Forward forward) {
  std::mt19937_64 rng(seed);
  CpuBackend<double> be(2);
  ParamLayout layout(SmallModel(1, 8, 12, 2, false, 0.0f), kVocab);
  Vec params = RandomParams(layout, rng);
  Vec x = RandomVec(rng, rows * 8);
  const Vec r = RandomVec(rng, rows * 8);
  auto layer = make(&be, layout);
  auto loss = [&] { return Dot(forward(*layer, params.data(), x.data(), rows), r); };
  loss();
  Vec grad(params.size(), 0.0), dx(x.size());
  layer->Backward(params.data(), r.data(), dx.data(), grad.data());
  MaxGradientError("params", &params, grad, ParamIndices(layout, prefix), loss);
  MaxGradientError("x", &x, dx, AllIndices(x.size()), loss);
}

TEST(GradFeedForward, MatchesFiniteDifferencesWithReluDropout) {
  CheckRowSublayer(
      5, "encoder.0.ffn.", 7,
      [](CpuBackend<double>* be, const ParamLayout& layout) {
        return std::make_unique<FeedForward<double>>(be, layout, "encoder.0.ffn.", 0.25f, 5);
      },
      [](FeedForward<double>& ffn, const double* p, const double* x, int rows) {
        return ffn.Forward(p, x, rows, &kKey);
      });
}

TEST(GradLayerNorm, MatchesFiniteDifferences) {
  CheckRowSublayer(
      6, "encoder.0.ln1.", 5,
      [](CpuBackend<double>* be, const ParamLayout& layout) {
        return std::make_unique<LayerNorm<double>>(be, layout, "encoder.0.ln1.");
      },
      [](LayerNorm<double>& norm, const double* p, const double* x, int rows) { return norm.Forward(p, x, rows); });
}

TEST(GradEmbedding, MatchesFiniteDifferencesWithDropout) {
  std::mt19937_64 rng(7);
  CpuBackend<double> be(2);
  ParamLayout layout(SmallModel(1, 8, 12, 2, false, 0.0f), kVocab);
  Vec params = RandomParams(layout, rng);
  const Batch b = RandomBatch(rng, 3, 5, 3, kVocab);
  const Vec r = RandomVec(rng, b.src.size() * 8);
  Embedding<double> emb(&be, layout, 0.3f, 0);
  auto loss = [&] { return Dot(emb.Forward(params.data(), b.src.data(), 3, 5, &kKey), r); };
  loss();
  Vec grad(params.size(), 0.0);
  emb.Backward(r.data(), grad.data());
  MaxGradientError("embedding", &params, grad, ParamIndices(layout, "embedding"), loss);
}

TEST(GradCrossEntropy, MatchesFiniteDifferencesAndSkipsPadding) {
  std::mt19937_64 rng(8);
  CpuBackend<double> be(2);
  const int rows = 6, vocab = 9;
  Vec logits = RandomVec(rng, rows * vocab);
  const std::vector<int32_t> targets = {4, kPadId, 8, 5, kPadId, 7};
  Vec loss_rows(rows), correct(rows), dlogits(logits.size());
  auto loss = [&] {
    be.CrossEntropy(rows, vocab, 0.1, logits.data(), targets.data(), kPadId, loss_rows.data(), correct.data(), nullptr);
    return be.Sum(rows, loss_rows.data());
  };
  be.CrossEntropy(rows, vocab, 0.1, logits.data(), targets.data(), kPadId, loss_rows.data(), correct.data(),
                  dlogits.data());
  MaxGradientError("logits", &logits, dlogits, AllIndices(logits.size()), loss);
  EXPECT_EQ(loss_rows[1], 0.0);
  EXPECT_EQ(loss_rows[4], 0.0);
}

// One layer of either stack, post-LN or pre-LN (the parameter), with every dropout site on.
class GradLayers : public ::testing::TestWithParam<bool> {
 protected:
  GradLayers() : config_(WithEveryDropout(SmallModel(1, 8, 12, 2, GetParam(), 0.2f))), layout_(config_, kVocab) {}
  CpuBackend<double> be_{2};
  const proto::ModelConfig config_;
  const ParamLayout layout_;
};

TEST_P(GradLayers, EncoderLayerMatchesFiniteDifferences) {
  std::mt19937_64 rng(9);
  Vec params = RandomParams(layout_, rng);
  const Batch b = RandomBatch(rng, 2, 5, 3, kVocab);
  Vec x = RandomVec(rng, b.src.size() * 8);
  const Vec r = RandomVec(rng, x.size());
  EncoderLayer<double> layer(&be_, layout_, config_, 0);
  auto loss = [&] { return Dot(layer.Forward(params.data(), x.data(), b.src.data(), 2, 5, &kKey), r); };
  loss();
  Vec grad(params.size(), 0.0);
  const double* dx = layer.Backward(params.data(), r.data(), grad.data());
  const Vec dx_copy(dx, dx + x.size());
  MaxGradientError("params", &params, grad, ParamIndices(layout_, "encoder.0."), loss);
  MaxGradientError("x", &x, dx_copy, AllIndices(x.size()), loss);
}

TEST_P(GradLayers, DecoderLayerMatchesFiniteDifferences) {
  std::mt19937_64 rng(10);
  Vec params = RandomParams(layout_, rng);
  const int batch = 3, src_len = 4, tgt_len = 5;
  const Batch b = RandomBatch(rng, batch, src_len, tgt_len, kVocab);
  Vec y = RandomVec(rng, b.tgt_in.size() * 8), memory = RandomVec(rng, b.src.size() * 8);
  const Vec r = RandomVec(rng, y.size());
  DecoderLayer<double> layer(&be_, layout_, config_, 0);
  auto loss = [&] {
    return Dot(layer.Forward(params.data(), y.data(), b.tgt_in.data(), tgt_len, memory.data(), b.src.data(), src_len,
                             batch, &kKey),
               r);
  };
  loss();
  Vec grad(params.size(), 0.0), dmemory(memory.size(), 0.0);
  const double* dy = layer.Backward(params.data(), r.data(), dmemory.data(), grad.data());
  const Vec dy_copy(dy, dy + y.size());
  MaxGradientError("params", &params, grad, ParamIndices(layout_, "decoder.0."), loss);
  MaxGradientError("y", &y, dy_copy, AllIndices(y.size()), loss);
  MaxGradientError("memory", &memory, dmemory, AllIndices(memory.size()), loss);
}

INSTANTIATE_TEST_SUITE_P(Norms, GradLayers, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "PreLN" : "PostLN"; });

class GradTransformer : public ::testing::TestWithParam<bool> {  // parameter: pre-LN
 protected:
  CpuBackend<double> be_{2};
};

TEST_P(GradTransformer, WholeModelMatchesFiniteDifferences) {
  std::mt19937_64 rng(GetParam() ? 21 : 20);
  CpuBackend<double> be(2);
  const auto config = WithEveryDropout(SmallModel(2, 8, 12, 2, GetParam(), 0.15f));
  Transformer<double> model(config, kVocab, &be);
  Vec params = RandomParams(model.layout(), rng);
  const Batch b = RandomBatch(rng, 3, 5, 7, kVocab);  // odd lengths, padding
  auto loss = [&] {
    Vec grad(params.size());
    return model.ForwardBackward(params.data(), b, kKey, grad.data()).loss_sum;
  };
  Vec grad(params.size());
  const StepStats stats = model.ForwardBackward(params.data(), b, kKey, grad.data());
  EXPECT_EQ(stats.target_tokens, b.tgt_tokens);
  MaxGradientError("all parameters", &params, grad, AllIndices(params.size()), loss);
}

// GradientReady: each layer's gradient is reported once backward has finished it (the values at
// the report are the final ones), in backward order, and the reports cover the vector exactly
// once. Checked with a copy taken inside the callback against the gradient at the end.
TEST_P(GradTransformer, GradientReadyReportsEachLayerOnceItsGradientIsFinal) {
  std::mt19937_64 rng(GetParam() ? 41 : 40);
  auto config = SmallModel(3, 8, 12, 2, GetParam(), 0.1f);
  Transformer<double> model(config, kVocab, &be_);
  const Vec params = RandomParams(model.layout(), rng);
  const Batch b = RandomBatch(rng, 3, 5, 7, kVocab);
  Vec grad(params.size(), 0.0), seen(params.size(), 0.0);
  std::vector<int> reports(params.size(), 0);
  std::vector<std::pair<uint64_t, uint64_t>> order;
  model.ForwardBackward(params.data(), b, kKey, grad.data(), [&](uint64_t begin, uint64_t end, const StepStats&) {
    order.emplace_back(begin, end);
    for (uint64_t i = begin; i < end; ++i) {
      seen[i] = grad[i];
      ++reports[i];
    }
  });
  EXPECT_EQ(*std::min_element(reports.begin(), reports.end()), 1);
  EXPECT_EQ(*std::max_element(reports.begin(), reports.end()), 1);
  EXPECT_EQ(seen, grad);  // bitwise: nothing changed a range after it was reported
  // Backward order: the last decoder layer first, the embedding (at offset 0) last.
  const ParamLayout& layout = model.layout();
  const size_t expected_reports = 2 * 3 + 1 + (GetParam() ? 2 : 0);
  ASSERT_EQ(order.size(), expected_reports);
  const size_t first = GetParam() ? 1 : 0;  // pre-LN reports the decoder's final norm first
  EXPECT_EQ(order[first].first, layout.Get("decoder.2.self_attn.w_qkv").offset);
  EXPECT_EQ(order.back().first, 0u);
  EXPECT_EQ(order.back().second, layout.Get("embedding").size());

  // Without a callback, the same gradient.
  Vec plain(params.size(), 0.0);
  model.ForwardBackward(params.data(), b, kKey, plain.data());
  EXPECT_EQ(plain, grad);
}

// dE's blocks of rows: min(blocks, vocab) of them, none empty, in order, covering the vocabulary,
// near-equal, and each beginning on an aligned row where their size allows it (the paper's
// 37,000-piece vocabulary in 8 blocks: at multiples of 64 rows, 256 bytes of a dlogits row; a
// vocabulary of 4625-row blocks started all but the first block 4 or 8 bytes off, where cuBLAS's
// tensor-core kernels cannot run).
TEST(OutputProjectionBlocks, NearEqualNonEmptyAndAlignedWhereTheirSizeAllows) {
  struct Case {
    int vocab, blocks, aligned_to;
  };
  for (const Case& c : {Case{37000, 8, 64}, Case{8000, 8, 64}, Case{32000, 3, 64}, Case{40, 8, 4}, Case{23, 8, 2},
                        Case{5, 8, 1}, Case{1000, 1, 1}}) {
    SCOPED_TRACE(std::to_string(c.vocab) + " rows in " + std::to_string(c.blocks));
    const std::vector<std::pair<int, int>> blocks = OutputProjectionBlocks(c.vocab, c.blocks);
    ASSERT_EQ(blocks.size(), static_cast<size_t>(std::min(c.vocab, c.blocks)));
    int at = 0;
    for (const auto& [first, last] : blocks) {
      EXPECT_EQ(first, at);
      EXPECT_EQ(first % c.aligned_to, 0);
      EXPECT_LT(first, last);
      const int ideal = c.vocab / static_cast<int>(blocks.size());
      EXPECT_LE(std::abs((last - first) - ideal), c.aligned_to + 1);
      at = last;
    }
    EXPECT_EQ(at, c.vocab);
  }
  // max_align 1: the near-equal blocks of before, wherever they begin.
  const std::vector<std::pair<int, int>> plain = OutputProjectionBlocks(37000, 8, 1);
  ASSERT_EQ(plain.size(), 8u);
  for (int b = 0; b < 8; ++b) EXPECT_EQ(plain[b], std::make_pair(4625 * b, 4625 * (b + 1)));
}

// With LookupRows (cluster.split_embedding) the embedding's range holds the output projection's
// part, reported first (before any layer, block by block of rows), and the lookups' part comes apart as the batch's
// rows: dense + rows is the gradient without the split (in double, to rounding), and a row no
// token looked up holds the dense part alone (to rounding).
TEST_P(GradTransformer, LookupRowsKeepTheLookupsPartApart) {
  std::mt19937_64 rng(GetParam() ? 51 : 50);
  auto config = SmallModel(2, 8, 12, 2, GetParam(), 0.1f);
  const int vocab = 23;  // more rows than a 3 x 5 + 3 x 7 batch of ids below 12 looks up
  Transformer<double> model(config, vocab, &be_);
  model.set_output_projection_blocks(8);
  const Vec params = RandomParams(model.layout(), rng);
  const Batch b = RandomBatch(rng, 3, 5, 7, 12);
  Vec whole(params.size(), 0.0), dense(params.size(), 0.0);
  model.ForwardBackward(params.data(), b, kKey, whole.data());
  LookupRows<double> lookups;
  std::vector<std::pair<uint64_t, uint64_t>> order;
  model.ForwardBackward(
      params.data(), b, kKey, dense.data(),
      [&](uint64_t begin, uint64_t end, const StepStats&) { order.emplace_back(begin, end); }, nullptr, &lookups);
  const uint64_t width = 8, table = model.layout().Get("embedding").size();
  // The embedding's range first, before any layer, in blocks of rows as dE is made.
  const std::vector<std::pair<int, int>> blocks = OutputProjectionBlocks(vocab, 8);
  ASSERT_EQ(blocks.size(), 8u);
  ASSERT_GT(order.size(), blocks.size());
  for (size_t k = 0; k < blocks.size(); ++k) {
    EXPECT_EQ(order[k], std::make_pair(blocks[k].first * width, blocks[k].second * width)) << "block " << k;
  }
  EXPECT_EQ(order[blocks.size() - 1].second, table);
  // The rows: the batch's source and target-input ids, ascending, distinct.
  std::set<int32_t> ids(b.src.begin(), b.src.end());
  ids.insert(b.tgt_in.begin(), b.tgt_in.end());
  EXPECT_EQ(lookups.rows, std::vector<int32_t>(ids.begin(), ids.end()));
  EXPECT_LT(lookups.rows.size(), static_cast<size_t>(vocab));
  Vec sum = dense;
  for (size_t r = 0; r < lookups.rows.size(); ++r) {
    for (uint64_t c = 0; c < width; ++c) sum[lookups.rows[r] * width + c] += lookups.values[r * width + c];
  }
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_NEAR(sum[i], whole[i], 1e-12 * (1 + std::fabs(whole[i]))) << "element " << i;
  }
  for (int32_t row = 0; row < vocab; ++row) {
    if (ids.count(row)) continue;
    for (uint64_t c = 0; c < width; ++c) {
      // To rounding: dE made by blocks of rows may take other BLAS kernels than the whole product.
      EXPECT_NEAR(dense[row * width + c], whole[row * width + c], 1e-12 * (1 + std::fabs(whole[row * width + c])))
          << row;
    }
  }
  // Outside the embedding, the split changes nothing at all.
  for (size_t i = table; i < params.size(); ++i) ASSERT_EQ(dense[i], whole[i]) << "element " << i;
}

TEST_P(GradTransformer, RandomShapesMatchFiniteDifferences) {
  // Shapes drawn at random (seeded): single sentences, length-1 sides, odd head counts of rows.
  std::mt19937_64 rng(GetParam() ? 31 : 30);
  for (int draw = 0; draw < 12; ++draw) {
    const int heads = std::uniform_int_distribution<int>(1, 3)(rng);
    const int d = heads * std::uniform_int_distribution<int>(1, 3)(rng) * 2;
    auto config = SmallModel(1, d, std::uniform_int_distribution<int>(3, 9)(rng), heads, GetParam(), 0.2f);
    const int vocab = std::uniform_int_distribution<int>(5, 9)(rng);
    const int sentences = std::uniform_int_distribution<int>(1, 3)(rng);
    const int src_len = std::uniform_int_distribution<int>(1, 6)(rng);
    const int tgt_len = std::uniform_int_distribution<int>(1, 6)(rng);
    Transformer<double> model(config, vocab, &be_);
    Vec params = RandomParams(model.layout(), rng);
    const Batch b = RandomBatch(rng, sentences, src_len, tgt_len, vocab);
    auto loss = [&] {
      Vec scratch(params.size());
      return model.ForwardBackward(params.data(), b, kKey, scratch.data()).loss_sum;
    };
    Vec grad(params.size());
    model.ForwardBackward(params.data(), b, kKey, grad.data());
    const std::string what = "d " + std::to_string(d) + " heads " + std::to_string(heads) + " batch " +
                             std::to_string(sentences) + "x(" + std::to_string(src_len) + "+" +
                             std::to_string(tgt_len) + ")";
    MaxGradientError(what, &params, grad, AllIndices(params.size()), loss);
  }
}

INSTANTIATE_TEST_SUITE_P(Norms, GradTransformer, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "PreLN" : "PostLN"; });

}  // namespace
}  // namespace psformer
