// Decoding on the CUDA backend (fp32 GEMMs) against the CPU: incremental log-probabilities against
// full recomputation on the CPU, and beam search giving the CPU's translations. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/cuda_test_util.h"
#include "tests/decode_test_util.h"
#include "worker/translate/beam_search.h"
#include "worker/translate/incremental_decoder.h"

namespace psformer {
namespace {

// Each test skips without a GPU.
class DecodeCuda : public testing::CudaVsCpu {};

TEST_F(DecodeCuda, IncrementalStepsEqualCpuFullRecomputation) {
  constexpr int kVocab = 11;
  for (bool pre_ln : {false, true}) {
    const proto::ModelConfig config = testing::SmallModelConfig(pre_ln);
    IncrementalDecoder<float> decoder(config, kVocab, gpu_.get());
    const std::vector<float> params = testing::RandomParams<float>(decoder.layout(), 7);
    const Batch batch = testing::MakeBatch({{4, 5, 6, 7, 8}, {9, 10}, {3, 4, 10, 6, 7, 5, 5}},
                                           {{5, 6, 7, 8}, {10, 3, 4, 4}, {8, 8, 4, 9}});
    const std::vector<double> reference = testing::ReferenceLogProbs<float>(config, kVocab, &cpu_, params, batch);
    const DeviceBuffer<float> device_params = testing::ToDevice(gpu_.get(), params);
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
      ASSERT_TRUE(testing::StepMatchesReference(log_probs, reference, sentence_of_row, t, batch.tgt_len, kVocab, 1e-5))
          << "pre_ln " << pre_ln;
    }
  }
}

TEST_F(DecodeCuda, BeamSearchGivesTheCpuTranslations) {
  constexpr int kVocab = 50;
  const proto::ModelConfig config = testing::SmallModelConfig(false);
  const BeamSearchOptions options{4, 0.6, 1.0, 5};
  BeamSearch<float> on_cpu(config, kVocab, &cpu_, options);
  BeamSearch<float> on_gpu(config, kVocab, gpu_.get(), options);
  const std::vector<float> params = testing::RandomParams<float>(on_cpu.layout(), 3, 0.3);
  const DeviceBuffer<float> cpu_params = testing::ToDevice(&cpu_, params);
  const DeviceBuffer<float> gpu_params = testing::ToDevice(gpu_.get(), params);
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
