// The whole Transformer on the CUDA backend against the same model on the CPU backend: loss,
// logits and every gradient of one step (post-LN and pre-LN, with dropout, so the masks must
// agree too), and 20 Adam steps in fp32 whose losses must track the CPU run's to 1e-4.
// Skipped where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/adam.h"
#include "tests/cuda_test_util.h"
#include "tests/model_test_util.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

using testing::RandomBatch;
using testing::RandomParams;
using testing::RelError;
using testing::SmallModel;
using testing::ToDevice;
using testing::ToHost;

constexpr int kVocab = 57;

std::vector<float> InitialParams(const ParamLayout& layout, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<double> p = RandomParams(layout, rng);
  std::vector<float> f(p.size());
  for (size_t i = 0; i < p.size(); ++i) f[i] = static_cast<float>(p[i] * 0.5);
  return f;
}

class CudaModel : public testing::CudaVsCpu, public ::testing::WithParamInterface<bool> {};

TEST_P(CudaModel, OneStepLossLogitsAndGradientsMatchCpu) {
  const proto::ModelConfig config = SmallModel(2, 32, 64, 4, /*pre_ln=*/GetParam(), /*dropout=*/0.1f);
  Transformer<float> cpu_model(config, kVocab, &cpu_);
  Transformer<float> gpu_model(config, kVocab, gpu_.get());
  const std::vector<float> params = InitialParams(cpu_model.layout(), 7);
  const size_t n = params.size();
  auto [cp, gp] = Both(params);
  auto cg = cpu_.Allocate<float>(n);
  auto gg = gpu_->Allocate<float>(n);
  std::mt19937_64 rng(11);
  const Batch batch = RandomBatch(rng, 5, 9, 11, kVocab);
  const DropoutKey key{99, 3, 1};

  const StepStats c = cpu_model.ForwardBackward(cp.data(), batch, key, cg.data());
  const StepStats g = gpu_model.ForwardBackward(gp.data(), batch, key, gg.data());
  EXPECT_EQ(g.target_tokens, c.target_tokens);
  EXPECT_EQ(g.correct, c.correct);
  EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * std::abs(c.loss_sum));
  const std::vector<float> cpu_grad = ToHost(cg), gpu_grad = ToHost(gg);
  EXPECT_LT(RelError(gpu_grad, cpu_grad), 1e-4);
  // Tensor by tensor, so a wrong small tensor is not hidden behind the embedding's scale.
  for (const ParamTensor& t : cpu_model.layout().tensors()) {
    std::vector<float> a(gpu_grad.begin() + t.offset, gpu_grad.begin() + t.offset + t.size());
    std::vector<float> b(cpu_grad.begin() + t.offset, cpu_grad.begin() + t.offset + t.size());
    // The key-bias parts of b_qkv / b_kv have gradients that are zero in exact arithmetic; their
    // rounding noise is far below the value-bias part that sets these tensors' scale.
    EXPECT_LT(RelError(a, b), 1e-4) << t.name;
  }

  const StepStats ce = cpu_model.Evaluate(cp.data(), batch);
  const StepStats ge = gpu_model.Evaluate(gp.data(), batch);
  EXPECT_NEAR(ge.loss_sum, ce.loss_sum, 1e-5 * std::abs(ce.loss_sum));
  const size_t logits = static_cast<size_t>(batch.sentences) * batch.tgt_len * kVocab;
  std::vector<float> gpu_logits(logits);
  gpu_->CopyToHost(gpu_logits.data(), gpu_model.logits(), logits * sizeof(float));
  std::vector<float> cpu_logits(cpu_model.logits(), cpu_model.logits() + logits);
  EXPECT_LT(RelError(gpu_logits, cpu_logits), 1e-5);
}

TEST_P(CudaModel, TwentyAdamStepsTrackTheCpuLosses) {
  const proto::ModelConfig config = SmallModel(1, 32, 64, 4, /*pre_ln=*/GetParam(), /*dropout=*/0.1f);
  Transformer<float> cpu_model(config, kVocab, &cpu_);
  Transformer<float> gpu_model(config, kVocab, gpu_.get());
  std::vector<float> cpu_params = InitialParams(cpu_model.layout(), 5), gpu_params = cpu_params;
  const size_t n = cpu_params.size();
  std::vector<float> cpu_m(n), cpu_v(n), gpu_m(n), gpu_v(n), grad(n);
  auto cp = cpu_.Allocate<float>(n), cg = cpu_.Allocate<float>(n);
  auto gp = gpu_->Allocate<float>(n), gg = gpu_->Allocate<float>(n);
  std::mt19937_64 rng(3);
  double first = 0, last = 0;
  for (int step = 1; step <= 20; ++step) {
    const Batch batch = RandomBatch(rng, 6, 8, 8, kVocab);
    const DropoutKey key{2026, static_cast<uint32_t>(step), 0};
    cp.Upload(cpu_params.data(), n);
    gp.Upload(gpu_params.data(), n);
    const StepStats c = cpu_model.ForwardBackward(cp.data(), batch, key, cg.data());
    const StepStats g = gpu_model.ForwardBackward(gp.data(), batch, key, gg.data());
    ASSERT_NEAR(g.loss_sum, c.loss_sum, 1e-4 * std::abs(c.loss_sum)) << "step " << step;
    cg.Download(grad.data(), n);
    NormalizeGradient(n, c.target_tokens, grad.data());
    AdamUpdate(AdamHyper{}, step, 1e-3, n, grad.data(), cpu_params.data(), cpu_m.data(), cpu_v.data());
    gg.Download(grad.data(), n);
    NormalizeGradient(n, g.target_tokens, grad.data());
    AdamUpdate(AdamHyper{}, step, 1e-3, n, grad.data(), gpu_params.data(), gpu_m.data(), gpu_v.data());
    (step == 1 ? first : last) = c.loss_sum / c.target_tokens;
  }
  EXPECT_LT(last, first) << "the runs must actually train for the comparison to mean anything";
}

INSTANTIATE_TEST_SUITE_P(Norms, CudaModel, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "PreLn" : "PostLn"; });

}  // namespace
}  // namespace psformer
