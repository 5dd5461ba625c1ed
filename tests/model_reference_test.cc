// The C++ model in fp32 against an independent NumPy float64 implementation
// (tests/reference/transformer_reference.py, which wrote tests/reference/transformer_fixture.txt):
// logits, summed loss and gradient entries (central differences there) within 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/model_test_util.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

struct FixtureCase {
  proto::ModelConfig config;
  int vocab = 0;
  Batch batch;
  std::vector<float> params;
  std::vector<double> logits;
  double loss = 0;
  std::vector<std::pair<size_t, double>> grads;
};

template <typename V>
std::vector<V> ReadValues(std::istringstream& line, size_t n) {
  std::vector<V> v(n);
  for (auto& x : v) line >> x;
  return v;
}

std::map<std::string, FixtureCase> LoadFixture() {
  std::map<std::string, FixtureCase> cases;
  std::ifstream in(std::string(PSFORMER_SOURCE_DIR) + "/tests/reference/transformer_fixture.txt");
  EXPECT_TRUE(in.good()) << "missing tests/reference/transformer_fixture.txt";
  std::string text, name;
  FixtureCase c;
  while (std::getline(in, text)) {
    std::istringstream line(text);
    std::string key;
    line >> key;
    if (key == "case") {
      line >> name;
      c = FixtureCase();
    } else if (key == "config") {
      int layers, d, f, heads, pre_ln;
      double eps;
      line >> layers >> d >> f >> heads >> c.vocab >> eps >> pre_ln;
      c.config = testing::SmallModel(layers, d, f, heads, pre_ln != 0, 0.0f);
      c.config.set_label_smoothing(static_cast<float>(eps));
    } else if (key == "batch") {
      line >> c.batch.sentences >> c.batch.src_len >> c.batch.tgt_len;
    } else if (key == "src") {
      c.batch.src = ReadValues<int32_t>(line, static_cast<size_t>(c.batch.sentences) * c.batch.src_len);
    } else if (key == "tgt_in") {
      c.batch.tgt_in = ReadValues<int32_t>(line, static_cast<size_t>(c.batch.sentences) * c.batch.tgt_len);
    } else if (key == "tgt_out") {
      c.batch.tgt_out = ReadValues<int32_t>(line, static_cast<size_t>(c.batch.sentences) * c.batch.tgt_len);
    } else if (key == "params") {
      size_t n;
      line >> n;
      for (double v : ReadValues<double>(line, n)) c.params.push_back(static_cast<float>(v));
    } else if (key == "logits") {
      size_t n;
      line >> n;
      c.logits = ReadValues<double>(line, n);
    } else if (key == "loss") {
      line >> c.loss;
    } else if (key == "grads") {
      size_t n;
      line >> n;
      for (size_t i = 0; i < n; ++i) {
        size_t index;
        double g;
        line >> index >> g;
        c.grads.emplace_back(index, g);
      }
    } else if (key == "end") {
      cases[name] = c;
    }
  }
  return cases;
}

class ReferenceFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceFixture, Fp32ModelMatchesNumpyFloat64) {
  auto cases = LoadFixture();
  ASSERT_TRUE(cases.count(GetParam())) << GetParam();
  const FixtureCase& c = cases[GetParam()];
  CpuBackend<float> be(2);
  Transformer<float> model(c.config, c.vocab, &be);
  ASSERT_EQ(model.parameter_count(), c.params.size()) << "the fixture's parameter order differs from the layout";

  const StepStats eval = model.Evaluate(c.params.data(), c.batch);
  EXPECT_NEAR(eval.loss_sum, c.loss, 1e-5 * std::abs(c.loss));
  ASSERT_EQ(c.logits.size(), static_cast<size_t>(c.batch.sentences) * c.batch.tgt_len * c.vocab);
  int bad_logits = 0;
  for (size_t i = 0; i < c.logits.size(); ++i) {
    // Logits are O(1); near-zero ones are compared against 1 rather than their own size.
    if (std::abs(model.logits()[i] - c.logits[i]) > 1e-5 * std::max(1.0, std::abs(c.logits[i]))) ++bad_logits;
  }
  EXPECT_EQ(bad_logits, 0);

  std::vector<float> grad(c.params.size());
  const StepStats train = model.ForwardBackward(c.params.data(), c.batch, DropoutKey{1, 1, 0}, grad.data());
  EXPECT_NEAR(train.loss_sum, c.loss, 1e-5 * std::abs(c.loss));
  ASSERT_GT(c.grads.size(), 20u);
  for (const auto& [index, reference] : c.grads) {
    EXPECT_NEAR(grad[index], reference, 1e-5 * std::abs(reference))
        << "parameter " << index << " (" << GetParam() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Norms, ReferenceFixture, ::testing::Values("post_ln", "pre_ln"));

}  // namespace
}  // namespace psformer
