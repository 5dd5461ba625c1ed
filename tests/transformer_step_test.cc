// TransformerStep (worker/transformer_step.h): with bf16 gradients on a backend that rounds on its
// device (a GPU), the gradient leaves the device already rounded, and those are the bits the
// client would have made of the fp32 gradient on the host, so a job's wire, sums and weights are
// the same whichever side rounds. The CPU backend, told here that it rounds on its "device",
// runs the very code path the CUDA backend takes; the CUDA kernel shares its rounding function
// (common/bfloat16.h) and is checked by the gpu label.
#include "worker/transformer_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "common/bfloat16.h"
#include "common/config_loader.h"
#include "common/param_init.h"
#include "common/param_layout.h"
#include "worker/backend/cpu_backend.h"
#include "worker/data/batch_source.h"

namespace psformer {
namespace {

// The CPU backend, taken for one that computes beside the host.
class DeviceRoundingCpuBackend final : public CpuBackend<float> {
 public:
  DeviceRoundingCpuBackend() : CpuBackend<float>(1) {}
  bool rounds_on_device() const override { return true; }
};

proto::JobConfig Bf16CopyConfig() {
  auto config = ParseConfigText(R"(
    name: "bf16-step"
    model { layers: 1 d_model: 16 d_ff: 32 heads: 2 max_positions: 32 }
    data { task: COPY copy_vocab_size: 12 copy_min_length: 2 copy_max_length: 7 copy_train_size: 200
           copy_valid_size: 20 }
    batching { src_tokens_per_step: 120 tgt_tokens_per_step: 120 }
    cluster { gradient_dtype: BF16 threads_per_process: 1 }
    training { seed: 9 }
  )",
                                "bf16-step");
  EXPECT_TRUE(config.ok()) << config.status().message();
  FillDefaults(&config.value());
  EXPECT_TRUE(ValidateConfig(*config).ok());
  return *config;
}

std::unique_ptr<TransformerStep> MakeStep(const proto::JobConfig& config, std::unique_ptr<Backend<float>> backend) {
  auto source = MakeBatchSource(config);
  EXPECT_TRUE(source.ok()) << source.status().message();
  auto step = TransformerStep::Create(config, 0, std::move(*source), std::move(backend), /*with_bleu=*/false);
  EXPECT_TRUE(step.ok()) << step.status().message();
  std::unique_ptr<TransformerStep> s = std::move(*step);
  const ParamLayout layout(config.model(), s->vocab_size());
  InitParamRange(layout, config.training().seed(), 0, s->parameter_count(), s->params().data());
  return s;
}

TEST(TransformerStep, ABf16GradientRoundedOnTheDeviceIsTheHostsRoundingOfTheFp32One) {
  const proto::JobConfig config = Bf16CopyConfig();
  auto host = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  EXPECT_EQ(host->grad_bf16(), nullptr);  // the CPU backend leaves the rounding to the client
  host->Compute(2, nullptr);
  std::span<const float> fp32 = host->grad();
  std::vector<uint16_t> expected(fp32.size());
  FloatsToBf16(fp32.data(), fp32.size(), expected.data());
  size_t nonzero = 0;
  for (float g : fp32) nonzero += g != 0.0f;
  ASSERT_GT(nonzero, fp32.size() / 2);  // a real gradient, not zeros that any path would match

  // Range by range, as backward reports layers: each range rounded, then copied.
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  ASSERT_NE(device->grad_bf16(), nullptr);
  std::vector<ElementRange> reported;
  device->Compute(2, [&](uint64_t b, uint64_t e, const StepStats&) { reported.push_back({b, e}); });
  ASSERT_FALSE(reported.empty());
  for (const ElementRange& r : reported) EXPECT_TRUE(device->gradient_copies().WaitOldest() == r);
  const uint64_t n = device->parameter_count();
  EXPECT_EQ(std::vector<uint16_t>(device->grad_bf16(), device->grad_bf16() + n), expected);

  // The whole gradient at once (no overlap).
  auto whole = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  whole->Compute(2, nullptr);
  EXPECT_EQ(std::vector<uint16_t>(whole->grad_bf16(), whole->grad_bf16() + n), expected);
}

// bf16 parameters uploaded as they came and widened on the device compute what the same values
// widened on the host compute: the step's gradient is the same, bit for bit.
TEST(TransformerStep, Bf16ParametersWidenedOnTheDeviceGiveTheHostsGradient) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_param_dtype(proto::ClusterConfig::BF16);
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  ASSERT_NE(device->params_bf16(), nullptr);
  const uint64_t n = device->parameter_count();
  FloatsToBf16(device->params().data(), n, device->params_bf16());
  std::vector<float> widened(n);
  Bf16ToFloats(device->params_bf16(), n, widened.data());
  std::fill(device->params().begin(), device->params().end(), 0.0f);  // so only the bf16 copy can count
  device->ParamsPulled(0, proto::BFLOAT16);
  device->Compute(3, nullptr);

  auto host = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  EXPECT_EQ(host->params_bf16(), nullptr);  // the client widens for the CPU backend
  host->params() = widened;
  host->ParamsPulled(0, proto::BFLOAT16);
  host->Compute(3, nullptr);
  std::vector<uint16_t> expected(n);
  FloatsToBf16(host->grad().data(), n, expected.data());
  EXPECT_EQ(std::vector<uint16_t>(device->grad_bf16(), device->grad_bf16() + n), expected);
  size_t changed = 0;  // the rounding is real: the widened values are not the fp32 ones
  auto fp32 = MakeStep(config, std::make_unique<CpuBackend<float>>(1));
  for (uint64_t i = 0; i < n; ++i) changed += fp32->params()[i] != widened[i];
  EXPECT_GT(changed, n / 2);
}

TEST(TransformerStep, AnFp32GradientStaysFp32WhateverTheBackend) {
  proto::JobConfig config = Bf16CopyConfig();
  config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::FP32);
  auto device = MakeStep(config, std::make_unique<DeviceRoundingCpuBackend>());
  EXPECT_EQ(device->grad_bf16(), nullptr);
}

}  // namespace
}  // namespace psformer
