// The copy task's generated corpus: contents within the configured ranges, a pure function of
// the seed, and validation data from a stream of its own.
#include "worker/data/copy_task.h"

#include <gtest/gtest.h>

#include <vector>

#include "worker/data/batch.h"

namespace psformer {
namespace {

std::vector<int32_t> Src(const ParallelCorpus& c, int64_t i) {
  std::vector<int32_t> v(c.src_length(i));
  c.CopySrc(i, v.data());
  return v;
}
std::vector<int32_t> Tgt(const ParallelCorpus& c, int64_t i) {
  std::vector<int32_t> v(c.tgt_length(i));
  c.CopyTgt(i, v.data());
  return v;
}

TEST(CopyTask, SequencesStayInRangeAndTargetEqualsSource) {
  CopyTaskOptions options{.vocab_size = 12, .min_length = 2, .max_length = 5, .pairs = 2000};
  const InMemoryCorpus corpus = MakeCopyCorpus(7, CopySplit::kTrain, options);
  ASSERT_EQ(corpus.size(), 2000);
  std::vector<int> length_seen(6, 0);
  std::vector<int> token_seen(12, 0);
  for (int64_t i = 0; i < corpus.size(); ++i) {
    const auto src = Src(corpus, i);
    ASSERT_GE(src.size(), 2u);
    ASSERT_LE(src.size(), 5u);
    ++length_seen[src.size()];
    EXPECT_EQ(Tgt(corpus, i), src);
    for (int32_t t : src) {
      ASSERT_GE(t, kNumReservedIds);
      ASSERT_LT(t, 12);
      ++token_seen[t];
    }
  }
  // Both ends of each range are reachable (an off-by-one in the draw would miss one).
  for (int len = 2; len <= 5; ++len) EXPECT_GT(length_seen[len], 0) << len;
  for (int t = kNumReservedIds; t < 12; ++t) EXPECT_GT(token_seen[t], 0) << t;
}

TEST(CopyTask, SameSeedSameCorpusOtherSeedOrSplitDiffers) {
  CopyTaskOptions options{.vocab_size = 16, .min_length = 3, .max_length = 10, .pairs = 50};
  const InMemoryCorpus a = MakeCopyCorpus(1, CopySplit::kTrain, options);
  const InMemoryCorpus b = MakeCopyCorpus(1, CopySplit::kTrain, options);
  const InMemoryCorpus other_seed = MakeCopyCorpus(2, CopySplit::kTrain, options);
  const InMemoryCorpus valid = MakeCopyCorpus(1, CopySplit::kValid, options);
  int same_as_other_seed = 0;
  int same_as_valid = 0;
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(Src(a, i), Src(b, i));
    same_as_other_seed += Src(a, i) == Src(other_seed, i);
    same_as_valid += Src(a, i) == Src(valid, i);
  }
  EXPECT_LT(same_as_other_seed, 3);
  EXPECT_LT(same_as_valid, 3);
}

}  // namespace
}  // namespace psformer
