// Decoding on the CUDA backend (fp32 GEMMs) against the CPU: incremental log-probabilities against
// full recomputation on the CPU, and beam search giving the CPU's translations. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/cuda_test_util.h"
#include "tests/decode_test_util.h"
#include "translate/beam_search.h"
#include "translate/incremental_decoder.h"

namespace psformer {
namespace {

std::unique_ptr<CudaBackend> MakeCuda() {
  auto cuda = CudaBackend::Create(CudaBackendOptions{});
  EXPECT_TRUE(cuda.ok()) << cuda.status().ToString();
  return cuda.ok() ? std::move(cuda).value() : nullptr;
}

TEST(DecodeCuda, IncrementalStepsEqualCpuFullRecomputation) {
  PSF_SKIP_WITHOUT_GPU();
  auto cuda = MakeCuda();
  ASSERT_NE(cuda, nullptr);
  CpuBackend<float> cpu(1);
  constexpr int kVocab = 11;
  for (bool pre_ln : {false, true}) {
    const proto::ModelConfig config = testing::SmallModelConfig(pre_ln);
    IncrementalDecoder<float> decoder(config, kVocab, cuda.get());
    const std::vector<float> params = testing::RandomParams<float>(decoder.layout(), 7);
    const Batch batch = testing::MakeBatch({{4, 5, 6, 7, 8}, {9, 10}, {3, 4, 10, 6, 7, 5, 5}},
                                           {{5, 6, 7, 8}, {10, 3, 4, 4}, {8, 8, 4, 9}});
    const std::vector<double> reference = testing::ReferenceLogProbs<float>(config, kVocab, &cpu, params, batch);
    DeviceBuffer<float> device_params = cuda->Allocate<float>(params.size());
    device_params.Upload(params.data(), params.size());
    decoder.Start(device_params.data(), batch.src, batch.sentences, batch.src_len);
    std::vector<int32_t> sentence_of_row = {0, 1, 2};
    std::vector<double> log_probs;
    for (int t = 0; t < batch.tgt_len; ++t) {
      if (t == 2) {  // rows copied, dropped and permuted, as beam search does
        decoder.Reorder({2, 0, 0});
        sentence_of_row = {2, 0, 0};
      }
      std::vector<int32_t> tokens;
      for (int32_t s : sentence_of_row) tokens.push_back(batch.tgt_in[s * batch.tgt_len + t]);
      decoder.Step(tokens, &log_probs);
      for (size_t r = 0; r < sentence_of_row.size(); ++r) {
        const int s = sentence_of_row[r];
        for (int v = 0; v < kVocab; ++v) {
          ASSERT_NEAR(log_probs[r * kVocab + v], reference[(s * batch.tgt_len + t) * kVocab + v], 1e-5)
              << "pre_ln " << pre_ln << " row " << r << " step " << t << " token " << v;
        }
      }
    }
  }
}

TEST(DecodeCuda, BeamSearchGivesTheCpuTranslations) {
  PSF_SKIP_WITHOUT_GPU();
  auto cuda = MakeCuda();
  ASSERT_NE(cuda, nullptr);
  CpuBackend<float> cpu(1);
  constexpr int kVocab = 50;
  const proto::ModelConfig config = testing::SmallModelConfig(false);
  const BeamSearchOptions options{4, 0.6, 1.0, 5};
  BeamSearch<float> on_cpu(config, kVocab, &cpu, options);
  BeamSearch<float> on_gpu(config, kVocab, cuda.get(), options);
  const std::vector<float> params = testing::RandomParams<float>(on_cpu.layout(), 3, 0.3);
  DeviceBuffer<float> cpu_params = cpu.Allocate<float>(params.size());
  cpu_params.Upload(params.data(), params.size());
  DeviceBuffer<float> gpu_params = cuda->Allocate<float>(params.size());
  gpu_params.Upload(params.data(), params.size());
  const std::vector<std::vector<int32_t>> sources = {{4, 5, 6}, {49, 3, 17, 8, 20, 10}, {6}, {}, {30, 31, 32, 33}};
  auto expected = on_cpu.Translate(cpu_params.data(), sources);
  auto actual = on_gpu.Translate(gpu_params.data(), sources);
  ASSERT_TRUE(expected.ok() && actual.ok());
  for (size_t s = 0; s < sources.size(); ++s) {
    EXPECT_EQ((*actual)[s].tokens, (*expected)[s].tokens) << "sentence " << s;
    EXPECT_NEAR((*actual)[s].score, (*expected)[s].score, 1e-4) << "sentence " << s;
  }
}

}  // namespace
}  // namespace psformer
