// Helpers for the model's tests: small configs, random parameters and padded batches, and a
// central-difference gradient checker in double precision.
#ifndef PSFORMER_TESTS_MODEL_TEST_UTIL_H_
#define PSFORMER_TESTS_MODEL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "worker/data/batch.h"

namespace psformer::testing {

inline proto::ModelConfig SmallModel(int layers, int d, int ff, int heads, bool pre_ln, float dropout) {
  proto::ModelConfig m;
  m.set_layers(layers);
  m.set_d_model(d);
  m.set_d_ff(ff);
  m.set_heads(heads);
  m.set_dropout(dropout);
  m.set_label_smoothing(0.1f);
  m.set_max_positions(64);
  m.set_norm_position(pre_ln ? proto::ModelConfig::PRE_LN : proto::ModelConfig::POST_LN);
  return m;
}

// Random parameters of moderate size; LayerNorm gains near 1 so normalisation matters.
inline std::vector<double> RandomParams(const ParamLayout& layout, std::mt19937_64& rng) {
  std::vector<double> p(layout.total_size());
  std::normal_distribution<double> normal(0.0, 0.4);
  for (const ParamTensor& t : layout.tensors()) {
    const bool gain = t.init == ParamInit::kOnes;
    for (uint64_t i = 0; i < t.size(); ++i) p[t.offset + i] = (gain ? 1.0 : 0.0) + normal(rng);
  }
  return p;
}

// A batch of `sentences` pairs with random lengths in [1, max] (one pair at the maximum so the
// padded lengths are src_len / tgt_len), eos / bos as the data pipeline makes them, pad after.
inline Batch RandomBatch(std::mt19937_64& rng, int sentences, int src_len, int tgt_len, int vocab) {
  Batch b;
  b.sentences = sentences;
  b.src_len = src_len;
  b.tgt_len = tgt_len;
  b.src.assign(static_cast<size_t>(sentences) * src_len, kPadId);
  b.tgt_in.assign(static_cast<size_t>(sentences) * tgt_len, kPadId);
  b.tgt_out.assign(static_cast<size_t>(sentences) * tgt_len, kPadId);
  std::uniform_int_distribution<int> token(kNumReservedIds, vocab - 1);
  for (int s = 0; s < sentences; ++s) {
    const int ls = s == 0 ? src_len : std::uniform_int_distribution<int>(1, src_len)(rng);
    const int lt = s == 0 ? tgt_len : std::uniform_int_distribution<int>(1, tgt_len)(rng);
    for (int i = 0; i < ls; ++i) b.src[s * src_len + i] = i == ls - 1 ? kEosId : token(rng);
    for (int i = 0; i < lt; ++i) {
      const int y = i == lt - 1 ? kEosId : token(rng);
      b.tgt_out[s * tgt_len + i] = y;
      if (i + 1 < lt) b.tgt_in[s * tgt_len + i + 1] = y;
    }
    b.tgt_in[s * tgt_len] = kBosId;
    b.src_tokens += ls;
    b.tgt_tokens += lt;
  }
  return b;
}

// Compares analytic[i] with the central difference (f(x+h) - f(x-h)) / 2h for every i in
// `indices`, perturbing x[i] in place. The relative error is |a - n| / max(|a|, |n|, floor).
// The floor is there for entries that are zero in exact arithmetic (the key bias, whose gradient
// vanishes because softmax ignores a constant shift): there the difference quotient is rounding
// noise of about eps * |f| / h ~ 1e-9, so such entries are held to |a - n| < 1e-6 * floor. Returns the largest relative
// error and reports it with `what`.
inline double MaxGradientError(const std::string& what, std::vector<double>* x, const std::vector<double>& analytic,
                               const std::vector<size_t>& indices, const std::function<double()>& f,
                               double floor = 1e-2, double h = 1e-5) {
  double worst = 0;
  size_t worst_index = 0;
  double worst_a = 0, worst_n = 0;
  for (size_t i : indices) {
    const double saved = (*x)[i];
    (*x)[i] = saved + h;
    const double up = f();
    (*x)[i] = saved - h;
    const double down = f();
    (*x)[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(analytic[i] - numeric) / std::max({std::abs(analytic[i]), std::abs(numeric), floor});
    if (err > worst) {
      worst = err;
      worst_index = i;
      worst_a = analytic[i];
      worst_n = numeric;
    }
  }
  if (worst >= 1e-6) {
    ADD_FAILURE() << what << ": relative error " << worst << " at " << worst_index << ": analytic " << worst_a
                  << " numeric " << worst_n;
  }
  return worst;
}

inline std::vector<size_t> AllIndices(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_MODEL_TEST_UTIL_H_
