// Philox4x32-10 against the Random123 known-answer vectors, the dropout masks built on it, and
// the parameter initialisation that draws from it.
#include "common/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/param_init.h"
#include "tests/model_test_util.h"
#include "worker/backend/cpu_backend.h"

namespace psformer {
namespace {

void ExpectPhilox(PhiloxCounter ctr, PhiloxKey key, PhiloxCounter want) {
  const PhiloxCounter got = Philox4x32_10(ctr, key);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

// Random123's kat_vectors, "philox4x32 10" lines: counter, key, expected output.
TEST(Philox, KnownAnswerZeros) {
  ExpectPhilox({{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
}

TEST(Philox, KnownAnswerOnes) {
  ExpectPhilox({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, {{0xffffffffu, 0xffffffffu}},
               {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
}

TEST(Philox, KnownAnswerPi) {
  ExpectPhilox({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, {{0xa4093822u, 0x299f31d0u}},
               {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Dropout, BackendMaskEqualsDropoutKeyAndHasTheRightRate) {
  CpuBackend<float> be(2);
  const size_t n = 100003;  // not a multiple of 4
  const float p = 0.1f;
  const DropoutKey key{42, 3, 1};
  std::vector<float> x(n, 2.0f), y(n), mask(n);
  be.DropoutForward(n, p, key, 17, x.data(), y.data(), mask.data());
  size_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = DropoutKeep(key, 17, i, p);
    ASSERT_EQ(mask[i] != 0.0f, keep) << i;
    if (keep) {
      EXPECT_FLOAT_EQ(mask[i], 1.0f / 0.9f);
      EXPECT_FLOAT_EQ(y[i], 2.0f / 0.9f);
    } else {
      ++dropped;
    }
  }
  // Binomial(n, 0.1): mean 10000, sd 95; 6 sd either side.
  EXPECT_NEAR(static_cast<double>(dropped), 0.1 * n, 600.0);
}

TEST(Dropout, MasksDifferAcrossStepWorkerAndSite) {
  const DropoutKey base{42, 3, 1};
  auto count_diff = [&](const DropoutKey& k, uint32_t site) {
    int diff = 0;
    for (uint64_t i = 0; i < 4000; ++i) diff += DropoutKeep(base, 5, i, 0.5f) != DropoutKeep(k, site, i, 0.5f);
    return diff;
  };
  EXPECT_EQ(count_diff(base, 5), 0);
  EXPECT_GT(count_diff(DropoutKey{42, 4, 1}, 5), 1500);
  EXPECT_GT(count_diff(DropoutKey{42, 3, 2}, 5), 1500);
  EXPECT_GT(count_diff(DropoutKey{43, 3, 1}, 5), 1500);
  EXPECT_GT(count_diff(base, 6), 1500);
}

TEST(ParamInit, AnyRangeEqualsTheWholeVector) {
  const auto config = testing::SmallModel(2, 16, 32, 4, true, 0.1f);
  ParamLayout layout(config, 23);
  const uint64_t total = layout.total_size();
  std::vector<float> whole(total);
  InitParamRange(layout, 99, 0, total, whole.data());
  for (int shards : {2, 3, 7}) {
    std::vector<float> pieces(total);
    for (int s = 0; s < shards; ++s) {
      const ShardRange r = ShardOf(total, shards, s);
      InitParamRange(layout, 99, r.begin, r.end, pieces.data() + r.begin);
    }
    EXPECT_EQ(0, std::memcmp(whole.data(), pieces.data(), total * sizeof(float))) << shards << " shards";
  }
  std::vector<float> other(total);
  InitParamRange(layout, 100, 0, total, other.data());
  EXPECT_NE(whole, other) << "the seed must matter";
}

TEST(ParamInit, FollowsEachTensorsInit) {
  const auto config = testing::SmallModel(1, 64, 128, 4, false, 0.1f);
  ParamLayout layout(config, 300);
  std::vector<float> p(layout.total_size());
  InitParamRange(layout, 7, 0, p.size(), p.data());
  for (const ParamTensor& t : layout.tensors()) {
    const float* v = p.data() + t.offset;
    double sum = 0, sum_sq = 0, max_abs = 0;
    for (uint64_t i = 0; i < t.size(); ++i) {
      sum += v[i];
      sum_sq += static_cast<double>(v[i]) * v[i];
      max_abs = std::max(max_abs, std::abs(static_cast<double>(v[i])));
    }
    const double mean = sum / t.size(), var = sum_sq / t.size() - mean * mean;
    switch (t.init) {
      case ParamInit::kZeros:
        EXPECT_EQ(max_abs, 0.0) << t.name;
        break;
      case ParamInit::kOnes:
        EXPECT_EQ(sum, static_cast<double>(t.size())) << t.name;
        EXPECT_EQ(var, 0.0) << t.name;
        break;
      case ParamInit::kXavierUniform: {
        const double a = std::sqrt(6.0 / (t.rows + t.cols));
        EXPECT_LE(max_abs, a) << t.name;
        EXPECT_NEAR(var, a * a / 3, 0.1 * a * a / 3) << t.name;  // uniform(-a, a) variance a^2/3
        EXPECT_NEAR(mean, 0.0, 0.05 * a) << t.name;
        break;
      }
      case ParamInit::kEmbeddingNormal:
        EXPECT_NEAR(var, 1.0 / 64, 0.1 / 64) << t.name;
        EXPECT_NEAR(mean, 0.0, 0.01) << t.name;
        break;
    }
  }
}

}  // namespace
}  // namespace psformer
