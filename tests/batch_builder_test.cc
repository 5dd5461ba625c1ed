// The padded batch layout of batch.h, checked entry by entry on hand-written pairs.
#include "worker/data/batch_builder.h"

#include <gtest/gtest.h>

#include <vector>

#include "worker/data/in_memory_corpus.h"

namespace psformer {
namespace {

InMemoryCorpus TwoPairs() {
  InMemoryCorpus corpus;
  corpus.Add(std::vector<int32_t>{10, 11, 12}, std::vector<int32_t>{20});
  corpus.Add(std::vector<int32_t>{13}, std::vector<int32_t>{21, 22, 23, 24});
  return corpus;
}

TEST(BatchBuilder, LayoutMatchesBatchContract) {
  const InMemoryCorpus corpus = TwoPairs();
  const std::vector<int64_t> ids = {1, 0};
  const Batch b = BuildBatch(corpus, ids);
  ASSERT_EQ(b.sentences, 2);
  ASSERT_EQ(b.src_len, 4);                              // longest source 3 + eos
  ASSERT_EQ(b.tgt_len, 5);                              // longest target 4 + eos
  const std::vector<int32_t> src = {13, kEosId, 0,  0,  //
                                    10, 11,     12, kEosId};
  const std::vector<int32_t> tgt_in = {kBosId, 21, 22, 23, 24,  //
                                       kBosId, 20, 0,  0,  0};
  const std::vector<int32_t> tgt_out = {21, 22,     23, 24, kEosId,  //
                                        20, kEosId, 0,  0,  0};
  EXPECT_EQ(b.src, src);
  EXPECT_EQ(b.tgt_in, tgt_in);
  EXPECT_EQ(b.tgt_out, tgt_out);
  EXPECT_EQ(b.src_tokens, 2 + 4);
  EXPECT_EQ(b.tgt_tokens, 5 + 2);
  EXPECT_EQ(b.pair_ids, ids);
  const PaddedSize padded = PaddedBatchSize(corpus, ids);
  EXPECT_EQ(padded.src, 8);
  EXPECT_EQ(padded.tgt, 10);
}

TEST(BatchBuilder, NoIdsGiveTheEmptyBatch) {
  const InMemoryCorpus corpus = TwoPairs();
  const Batch b = BuildBatch(corpus, {});
  EXPECT_EQ(b.sentences, 0);
  EXPECT_EQ(b.src_len, 0);
  EXPECT_EQ(b.tgt_len, 0);
  EXPECT_TRUE(b.src.empty());
  EXPECT_TRUE(b.tgt_out.empty());
  EXPECT_EQ(b.tgt_tokens, 0);
}

}  // namespace
}  // namespace psformer
