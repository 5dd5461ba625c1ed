// Beam search against independent references that score with full recomputation
// (Transformer<T>::Evaluate): a plain greedy decoder for beam 1, and exhaustive search over every
// output sequence on a tiny vocabulary for a beam wide enough to be exact.
#include "worker/translate/beam_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/decode_test_util.h"
#include "worker/backend/cpu_backend.h"

namespace psformer {
namespace {

using testing::MakeBatch;
using testing::ReferenceLogProbs;

TEST(LengthPenaltyTest, IsTheGnmtFormula) {
  EXPECT_DOUBLE_EQ(LengthPenalty(1, 0.6), 1.0);  // ((5 + 1) / 6)^alpha
  EXPECT_DOUBLE_EQ(LengthPenalty(7, 1.0), 2.0);
  EXPECT_NEAR(LengthPenalty(25, 0.5), std::sqrt(5.0), 1e-15);
  EXPECT_NEAR(LengthPenalty(10, 0.6), std::pow(2.5, 0.6), 1e-15);
  EXPECT_DOUBLE_EQ(LengthPenalty(40, 0.0), 1.0);
}

TEST(BeamSearchOptionsTest, RejectsOutOfRangeValues) {
  EXPECT_TRUE(ValidateBeamSearchOptions(BeamSearchOptions{}).ok());
  EXPECT_FALSE(ValidateBeamSearchOptions(BeamSearchOptions{0, 0.6, 1, 50}).ok());
  EXPECT_FALSE(ValidateBeamSearchOptions(BeamSearchOptions{4, -0.1, 1, 50}).ok());
  EXPECT_FALSE(ValidateBeamSearchOptions(BeamSearchOptions{4, NAN, 1, 50}).ok());
  EXPECT_FALSE(ValidateBeamSearchOptions(BeamSearchOptions{4, 0.6, -1, 50}).ok());
  EXPECT_FALSE(ValidateBeamSearchOptions(BeamSearchOptions{4, 0.6, 1, -2}).ok());
}

class BeamSearchTest : public ::testing::Test {
 protected:
  // Log-probability of emitting `output` then eos after `source`, by full recomputation.
  double SequenceLogProb(const std::vector<double>& params, const std::vector<int32_t>& source,
                         const std::vector<int32_t>& output) {
    const Batch batch = MakeBatch({source}, {output});
    const std::vector<double> lp = ReferenceLogProbs<double>(config_, vocab_, &backend_, params, batch);
    double sum = 0;
    for (int t = 0; t < batch.tgt_len; ++t) sum += lp[t * vocab_ + batch.tgt_out[t]];
    return sum;
  }

  // Random weights for `search`'s model (testing::RandomParams with `seed` and `noise`), on the
  // host and on the backend.
  std::pair<std::vector<double>, DeviceBuffer<double>> RandomWeights(const BeamSearch<double>& search, uint64_t seed,
                                                                     double noise) {
    std::vector<double> params = testing::RandomParams<double>(search.layout(), seed, noise);
    DeviceBuffer<double> device_params = testing::ToDevice(&backend_, params);
    return {std::move(params), std::move(device_params)};
  }

  CpuBackend<double> backend_{1};
  proto::ModelConfig config_ = testing::SmallModelConfig(false);
  int vocab_ = 0;
};

// A greedy decoder written the obvious way: recompute the whole model for every prefix and take
// the most likely token (never pad or bos; only eos once the prefix has max_len tokens).
std::vector<int32_t> GreedyByRecomputation(const proto::ModelConfig& config, int vocab, Backend<double>* backend,
                                           const std::vector<double>& params, const std::vector<int32_t>& source,
                                           int max_len) {
  std::vector<int32_t> output;
  while (true) {
    const Batch batch = MakeBatch({source}, {output});
    const std::vector<double> lp = ReferenceLogProbs<double>(config, vocab, backend, params, batch);
    const double* last = lp.data() + output.size() * vocab;
    int32_t best = kEosId;
    if (static_cast<int>(output.size()) < max_len) {
      for (int32_t v = kEosId; v < vocab; ++v) {
        if (last[v] > last[best]) best = v;
      }
    }
    if (best == kEosId) return output;
    output.push_back(best);
  }
}

TEST_F(BeamSearchTest, BeamOneIsGreedy) {
  vocab_ = 12;
  const BeamSearchOptions options{1, 0.6, 1.0, 4};
  BeamSearch<double> search(config_, vocab_, &backend_, options);
  const auto [params, device_params] = RandomWeights(search, 21, 0.3);
  const std::vector<std::vector<int32_t>> sources = {{4, 5, 6}, {11, 3, 7, 8, 9, 10}, {6}, {8, 8, 8, 8}};
  auto result = search.Translate(device_params.data(), sources);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  int total_tokens = 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    const int max_len = static_cast<int>(sources[s].size()) + 4;
    const std::vector<int32_t> greedy = GreedyByRecomputation(config_, vocab_, &backend_, params, sources[s], max_len);
    EXPECT_EQ((*result)[s].tokens, greedy) << "sentence " << s;
    EXPECT_NEAR((*result)[s].log_prob, SequenceLogProb(params, sources[s], greedy), 1e-10);
    total_tokens += static_cast<int>(greedy.size());
  }
  EXPECT_GT(total_tokens, 0);  // not every sentence ended at once
}

// Every output of up to max_len content tokens over {unk, 4, 5} (V = 6: pad, bos, eos, unk, 4, 5),
// scored by full recomputation; a beam as wide as the number of sequences must find the best.
TEST_F(BeamSearchTest, WideBeamEqualsExhaustiveSearch) {
  vocab_ = 6;
  const int max_len = 3;
  const std::vector<std::vector<int32_t>> sources = {{4, 5, 5}, {3}, {5, 4, 3, 4, 5}, {4}, {5, 5, 5, 3}, {3, 4}};
  std::vector<std::vector<int32_t>> outputs = {{}};
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (static_cast<int>(outputs[i].size()) == max_len) continue;
    for (int32_t v : {3, 4, 5}) {
      outputs.push_back(outputs[i]);
      outputs.back().push_back(v);
    }
  }
  ASSERT_EQ(outputs.size(), 40u);
  std::vector<int> winner_lengths;
  for (double alpha : {0.0, 0.6, 1.5, 4.0}) {
    const BeamSearchOptions options{40, alpha, 0.0, max_len};
    BeamSearch<double> search(config_, vocab_, &backend_, options);
    // Larger weights give peaked distributions, where length matters and ties are unlikely.
    const auto [params, device_params] = RandomWeights(search, 5, 0.5);
    auto result = search.Translate(device_params.data(), sources);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    for (size_t s = 0; s < sources.size(); ++s) {
      double best_score = -INFINITY, best_log_prob = 0;
      std::vector<int32_t> best;
      for (const auto& output : outputs) {
        const double log_prob = SequenceLogProb(params, sources[s], output);
        const double score = log_prob / std::pow((5.0 + output.size() + 1) / 6.0, alpha);
        if (score > best_score) {
          best_score = score;
          best_log_prob = log_prob;
          best = output;
        }
      }
      EXPECT_EQ((*result)[s].tokens, best) << "sentence " << s << " alpha " << alpha;
      EXPECT_NEAR((*result)[s].log_prob, best_log_prob, 1e-10);
      EXPECT_NEAR((*result)[s].score, best_score, 1e-10);
      winner_lengths.push_back(static_cast<int>(best.size()));
    }
  }
  // The penalty changes which length wins somewhere, so it is exercised, not just multiplied by 1.
  EXPECT_NE(*std::min_element(winner_lengths.begin(), winner_lengths.end()),
            *std::max_element(winner_lengths.begin(), winner_lengths.end()));
}

// A batch gives each sentence what it gets alone, in input order.
TEST_F(BeamSearchTest, BatchPreservesOrderAndMatchesSingleSentences) {
  vocab_ = 12;
  const BeamSearchOptions options{3, 0.6, 1.0, 3};
  BeamSearch<double> search(config_, vocab_, &backend_, options);
  const auto [params, device_params] = RandomWeights(search, 9, 0.3);
  const std::vector<std::vector<int32_t>> sources = {{4, 5, 6, 7}, {11}, {9, 3, 9, 3, 9, 3, 9}, {}, {10, 10}};
  auto batch = search.Translate(device_params.data(), sources);
  ASSERT_TRUE(batch.ok());
  for (size_t s = 0; s < sources.size(); ++s) {
    auto alone = search.Translate(device_params.data(), {sources[s]});
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*batch)[s].tokens, (*alone)[0].tokens) << "sentence " << s;
    EXPECT_NEAR((*batch)[s].score, (*alone)[0].score, 1e-10);
  }
}

TEST_F(BeamSearchTest, RejectsBadSources) {
  vocab_ = 12;
  BeamSearch<double> search(config_, vocab_, &backend_, BeamSearchOptions{});
  const auto [params, device_params] = RandomWeights(search, 1, 0.1);
  EXPECT_FALSE(search.Translate(device_params.data(), {{4}, {12}}).ok());                    // id >= vocab
  EXPECT_FALSE(search.Translate(device_params.data(), {{4, kEosId}}).ok());                  // reserved id
  EXPECT_FALSE(search.Translate(device_params.data(), {std::vector<int32_t>(32, 4)}).ok());  // > max_positions - 1
  EXPECT_TRUE(search.Translate(device_params.data(), {std::vector<int32_t>(31, 4)}).ok());
}

}  // namespace
}  // namespace psformer
