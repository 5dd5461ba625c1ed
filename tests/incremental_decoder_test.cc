// Incremental decoding (cached encoder output, cached cross-attention keys/values, self-attention
// keys/values of earlier positions kept) must give the same per-step log-probabilities as full
// recomputation with Transformer<T>::Evaluate: within 1e-5 in fp32, 1e-10 in fp64.
#include "worker/translate/incremental_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/decode_test_util.h"
#include "worker/backend/cpu_backend.h"

namespace psformer {
namespace {

using testing::MakeBatch;
using testing::ReferenceLogProbs;

template <typename T>
double Tolerance() {
  return sizeof(T) == sizeof(float) ? 1e-5 : 1e-10;
}

template <typename T>
class IncrementalDecoderTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(IncrementalDecoderTest, Types);

constexpr int kVocab = 11;

// Sentences of different lengths on both sides, so source padding is masked and rows end early.
const std::vector<std::vector<int32_t>> kSources = {{4, 5, 6, 7, 8}, {9, 10}, {3, 4, 10, 6, 7, 5, 5}};
const std::vector<std::vector<int32_t>> kTargets = {{5, 6, 7, 8, 9, 4}, {10, 3}, {8, 8, 4, 9}};

template <typename T>
void ExpectSameAsFullRecomputation(bool pre_ln) {
  CpuBackend<T> backend(1);
  const proto::ModelConfig config = testing::SmallModelConfig(pre_ln);
  IncrementalDecoder<T> decoder(config, kVocab, &backend);
  const std::vector<T> params = testing::RandomParams<T>(decoder.layout(), 7);
  const Batch batch = MakeBatch(kSources, kTargets);
  const std::vector<double> reference = ReferenceLogProbs<T>(config, kVocab, &backend, params, batch);

  const DeviceBuffer<T> device_params = testing::ToDevice(&backend, params);
  decoder.Start(device_params.data(), batch.src, batch.sentences, batch.src_len);
  std::vector<double> log_probs;
  int compared = 0;
  for (int t = 0; t < batch.tgt_len; ++t) {
    std::vector<int32_t> tokens(batch.sentences);
    for (int b = 0; b < batch.sentences; ++b) tokens[b] = batch.tgt_in[b * batch.tgt_len + t];
    decoder.Step(tokens, &log_probs);
    for (int b = 0; b < batch.sentences; ++b) {
      if (batch.tgt_out[b * batch.tgt_len + t] == kPadId) continue;  // past this sentence's end
      for (int v = 0; v < kVocab; ++v) {
        ASSERT_NEAR(log_probs[b * kVocab + v], reference[(b * batch.tgt_len + t) * kVocab + v], Tolerance<T>())
            << "sentence " << b << " step " << t << " token " << v;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 + 1 + 2 + 1 + 4 + 1);
}

TYPED_TEST(IncrementalDecoderTest, PostLnStepsEqualFullRecomputation) {
  ExpectSameAsFullRecomputation<TypeParam>(false);
}
TYPED_TEST(IncrementalDecoderTest, PreLnStepsEqualFullRecomputation) { ExpectSameAsFullRecomputation<TypeParam>(true); }

// After Reorder, row r continues sentence parents[r] (copied, dropped or permuted rows) and its
// log-probabilities are still those of full recomputation.
TYPED_TEST(IncrementalDecoderTest, ReorderedRowsContinueTheirParents) {
  using T = TypeParam;
  CpuBackend<T> backend(1);
  const proto::ModelConfig config = testing::SmallModelConfig(false);
  IncrementalDecoder<T> decoder(config, kVocab, &backend);
  const std::vector<T> params = testing::RandomParams<T>(decoder.layout(), 11);
  // Equal target lengths so every row is compared at every step.
  const std::vector<std::vector<int32_t>> targets = {{5, 6, 7, 8}, {10, 3, 4, 4}, {8, 8, 4, 9}};
  const Batch batch = MakeBatch(kSources, targets);
  const std::vector<double> reference = ReferenceLogProbs<T>(config, kVocab, &backend, params, batch);

  const DeviceBuffer<T> device_params = testing::ToDevice(&backend, params);
  decoder.Start(device_params.data(), batch.src, batch.sentences, batch.src_len);
  std::vector<int32_t> sentence_of_row = {0, 1, 2};
  const std::vector<std::vector<int32_t>> reorders = {{2, 0, 0, 1}, {3, 1}, {1, 1, 0}};
  std::vector<double> log_probs;
  for (int t = 0; t < batch.tgt_len; ++t) {
    if (t >= 1 && t - 1 < static_cast<int>(reorders.size())) {
      const std::vector<int32_t>& parents = reorders[t - 1];
      std::vector<int32_t> next;
      for (int32_t p : parents) next.push_back(sentence_of_row[p]);
      sentence_of_row = next;
      decoder.Reorder(parents);
    }
    ASSERT_EQ(decoder.rows(), static_cast<int>(sentence_of_row.size()));
    std::vector<int32_t> tokens;
    for (int32_t s : sentence_of_row) tokens.push_back(batch.tgt_in[s * batch.tgt_len + t]);
    decoder.Step(tokens, &log_probs);
    ASSERT_TRUE(
        testing::StepMatchesReference(log_probs, reference, sentence_of_row, t, batch.tgt_len, kVocab, Tolerance<T>()));
  }
}

}  // namespace
}  // namespace psformer
