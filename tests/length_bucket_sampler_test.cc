// LengthBucketSampler and the BatchSource built on it: every pair once per epoch across
// workers, token budgets, buckets, resumption without replay, and determinism across seeds
// and processes.
#include "worker/data/length_bucket_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "common/config_loader.h"
#include "tests/batch_digest.h"
#include "tests/test_util.h"
#include "worker/data/batch_builder.h"
#include "worker/data/copy_task.h"
#include "worker/data/corpus_file.h"
#include "worker/data/deterministic_random.h"
#include "worker/data/sampled_batch_source.h"

namespace psformer {
namespace {

// Varied lengths on both sides, unlike the copy task, so that source and target buckets differ.
InMemoryCorpus VariedCorpus(int64_t pairs, uint64_t seed) {
  SplitMix64 random(seed);
  InMemoryCorpus corpus;
  for (int64_t i = 0; i < pairs; ++i) {
    std::vector<int32_t> src(1 + random.Below(40), 5);
    std::vector<int32_t> tgt(1 + random.Below(40), 6);
    corpus.Add(src, tgt);
  }
  return corpus;
}

SamplerOptions Budget(int64_t tokens, uint64_t seed = 1) {
  SamplerOptions o;
  o.src_tokens_per_step = tokens;
  o.tgt_tokens_per_step = tokens;
  o.bucket_width = 8;
  o.seed = seed;
  return o;
}

TEST(LengthBucketSampler, EveryPairOncePerEpochAcrossWorkers) {
  const InMemoryCorpus corpus = VariedCorpus(1500, 3);
  for (int workers : {1, 2, 3}) {
    auto sampler = LengthBucketSampler::Create(corpus, Budget(400));
    ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
    const int64_t n = sampler->batches_per_epoch();
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::vector<int> seen(corpus.size(), 0);
      for (int64_t step = epoch * n + 1; step <= (epoch + 1) * n; ++step) {
        for (int w = 0; w < workers; ++w) {
          for (int64_t id : sampler->WorkerShare(step, w, workers)) ++seen[id];
        }
      }
      for (int64_t id = 0; id < corpus.size(); ++id) {
        ASSERT_EQ(seen[id], 1) << "pair " << id << " epoch " << epoch << " workers " << workers;
      }
    }
  }
}

TEST(LengthBucketSampler, SharesUnionIsTheSameSentencesForAnyWorkerCountAndIsBalanced) {
  const InMemoryCorpus corpus = VariedCorpus(800, 4);
  auto sampler = LengthBucketSampler::Create(corpus, Budget(500));
  ASSERT_TRUE(sampler.ok());
  for (int64_t step = 1; step <= 2 * sampler->batches_per_epoch(); ++step) {
    const std::vector<int64_t> one = sampler->WorkerShare(step, 0, 1);
    const std::multiset<int64_t> expected(one.begin(), one.end());
    for (int workers : {2, 3, 5}) {
      std::multiset<int64_t> got;
      size_t smallest = SIZE_MAX, largest = 0;
      for (int w = 0; w < workers; ++w) {
        const auto share = sampler->WorkerShare(step, w, workers);
        got.insert(share.begin(), share.end());
        smallest = std::min(smallest, share.size());
        largest = std::max(largest, share.size());
      }
      ASSERT_EQ(got, expected) << "step " << step << " workers " << workers;
      EXPECT_LE(largest - smallest, 1u) << "step " << step << " workers " << workers;
    }
  }
}

TEST(LengthBucketSampler, BatchesRespectTokenBudgetsAndBuckets) {
  const InMemoryCorpus corpus = VariedCorpus(2000, 5);
  SamplerOptions options = Budget(0);
  options.src_tokens_per_step = 300;  // unequal budgets: each side must be checked on its own
  options.tgt_tokens_per_step = 450;
  auto sampler = LengthBucketSampler::Create(corpus, options);
  ASSERT_TRUE(sampler.ok());
  for (const auto& ids : sampler->planned_batches()) {
    // Independent of the sampler's own arithmetic: measure the built batch.
    const Batch b = BuildBatch(corpus, ids);
    EXPECT_LE(int64_t{b.sentences} * b.src_len, 300);
    EXPECT_LE(int64_t{b.sentences} * b.tgt_len, 450);
    int32_t shortest = INT32_MAX, longest = 0;
    for (int64_t id : ids) {
      shortest = std::min(shortest, corpus.tgt_length(id));
      longest = std::max(longest, corpus.tgt_length(id));
    }
    EXPECT_LT(longest - shortest, options.bucket_width);
  }
}

TEST(LengthBucketSampler, ResumingAtAnyStepGivesTheUninterruptedBatches) {
  const InMemoryCorpus corpus = VariedCorpus(600, 6);
  auto uninterrupted = LengthBucketSampler::Create(corpus, Budget(300));
  ASSERT_TRUE(uninterrupted.ok());
  const int64_t last = 3 * uninterrupted->batches_per_epoch() + 2;
  std::vector<std::vector<int64_t>> expected;
  for (int64_t step = 1; step <= last; ++step) expected.push_back(uninterrupted->WorkerShare(step, 1, 2));
  for (int64_t resume_at : {int64_t{2}, uninterrupted->batches_per_epoch() + 1, last - 3}) {
    auto resumed = LengthBucketSampler::Create(corpus, Budget(300));  // a fresh process's sampler
    ASSERT_TRUE(resumed.ok());
    for (int64_t step = resume_at; step <= last; ++step) {
      ASSERT_EQ(resumed->WorkerShare(step, 1, 2), expected[step - 1]) << "resumed at " << resume_at;
    }
  }
  // Going back to an earlier epoch (a restarted worker recomputing a lost step) works too.
  EXPECT_EQ(uninterrupted->WorkerShare(3, 1, 2), expected[2]);
}

TEST(LengthBucketSampler, OrderDependsOnSeedAndEpochAndShuffleCanBeOff) {
  const InMemoryCorpus corpus = VariedCorpus(1000, 7);
  auto a = LengthBucketSampler::Create(corpus, Budget(300, 1));
  auto b = LengthBucketSampler::Create(corpus, Budget(300, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t n = a->batches_per_epoch();
  ASSERT_GT(n, 20);
  std::vector<int64_t> order_a0, order_a1, order_b0;
  for (int64_t i = 1; i <= n; ++i) order_a0.push_back(a->Locate(i).batch);
  for (int64_t i = 1; i <= n; ++i) order_a1.push_back(a->Locate(n + i).batch);
  for (int64_t i = 1; i <= n; ++i) order_b0.push_back(b->GlobalBatch(i).front());
  std::vector<int64_t> firsts_a0;
  for (int64_t i = 1; i <= n; ++i) firsts_a0.push_back(a->GlobalBatch(i).front());
  EXPECT_NE(order_a0, order_a1) << "epochs must be shuffled differently";
  EXPECT_NE(firsts_a0, order_b0) << "seeds must give different batch sequences";

  SamplerOptions fixed = Budget(300);
  fixed.shuffle = false;
  auto c = LengthBucketSampler::Create(corpus, fixed);
  ASSERT_TRUE(c.ok());
  for (int64_t i = 1; i <= 2 * n; ++i) EXPECT_EQ(c->Locate(i).batch, (i - 1) % n);
}

TEST(LengthBucketSampler, RejectsAPairOverTheBudgetAndAnEmptyCorpus) {
  InMemoryCorpus corpus;
  corpus.Add(std::vector<int32_t>(10, 5), std::vector<int32_t>(30, 5));
  auto sampler = LengthBucketSampler::Create(corpus, Budget(20));
  ASSERT_FALSE(sampler.ok());
  EXPECT_NE(sampler.status().message().find("pair 0 has 31 target tokens"), std::string::npos)
      << sampler.status().message();
  EXPECT_NE(sampler.status().message().find("batching.tgt_tokens_per_step (20)"), std::string::npos);
  auto empty = LengthBucketSampler::Create(InMemoryCorpus(), Budget(20));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no sentence pairs"), std::string::npos);
}

// Padding counted straight from built batches: the pad entries of src and tgt_out.
TEST(EpochPadding, MatchesHandCountAndBuiltBatches) {
  InMemoryCorpus tiny;  // one bucket and one batch: rows padded to 6 (source) and 4 (target)
  tiny.Add(std::vector<int32_t>(3, 5), std::vector<int32_t>(3, 5));
  tiny.Add(std::vector<int32_t>(5, 5), std::vector<int32_t>(3, 5));
  tiny.Add(std::vector<int32_t>(1, 5), std::vector<int32_t>(1, 5));
  auto one = LengthBucketSampler::Create(tiny, Budget(100));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->batches_per_epoch(), 1);
  const PaddingStats stats = EpochPadding(tiny, *one);
  EXPECT_EQ(stats.src_tokens, 4 + 6 + 2);
  EXPECT_EQ(stats.tgt_tokens, 4 + 4 + 2);
  EXPECT_EQ(stats.src_padded, 3 * 6);
  EXPECT_EQ(stats.tgt_padded, 3 * 4);
  EXPECT_NEAR(stats.fraction(), 1.0 - 22.0 / 30.0, 1e-12);

  const InMemoryCorpus corpus = VariedCorpus(3000, 9);
  auto sampler = LengthBucketSampler::Create(corpus, Budget(600));
  ASSERT_TRUE(sampler.ok());
  int64_t pads = 0, entries = 0;
  for (const auto& ids : sampler->planned_batches()) {
    const Batch b = BuildBatch(corpus, ids);
    for (const auto* side : {&b.src, &b.tgt_out}) {
      pads += std::count(side->begin(), side->end(), kPadId);
      entries += static_cast<int64_t>(side->size());
    }
  }
  const PaddingStats varied = EpochPadding(corpus, *sampler);
  EXPECT_EQ(varied.src_padded + varied.tgt_padded, entries);
  EXPECT_NEAR(varied.fraction(), static_cast<double>(pads) / entries, 1e-12);
  // Uniform lengths 1..40 on each side, independently: bucketing keeps padding far below the
  // ~50% that batches of random pairs would have.
  EXPECT_LT(varied.fraction(), 0.25);
}

// The demo corpus under configs/bible.pbtxt's budget. Needs the prepared corpus: run
//   scripts/get-bible-corpus data/bible-text && build/psformer prepare ... --out data/bible
// (see configs/bible.pbtxt) or point PSFORMER_BIBLE_DIR at it.
TEST(EpochPadding, BibleCorpusUnderTheConfiguredBudgetIsBelowFifteenPercent) {
  const char* env = std::getenv("PSFORMER_BIBLE_DIR");
  const std::string dir = env != nullptr ? env : std::string(PSFORMER_SOURCE_DIR) + "/data/bible";
  if (!std::filesystem::exists(dir + "/train.bin")) {
    GTEST_SKIP() << "no prepared Bible corpus at " << dir << " (scripts/get-bible-corpus, then psformer prepare; "
                 << "see configs/bible.pbtxt)";
  }
  auto config = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/bible.pbtxt", {});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto corpus = CorpusFile::Open(dir + "/train.bin");
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  auto sampler = LengthBucketSampler::Create(**corpus, SamplerOptionsFromConfig(*config));
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  const PaddingStats stats = EpochPadding(**corpus, *sampler);
  std::cout << "Bible corpus, " << (*corpus)->size() << " pairs, budget " << config->batching().src_tokens_per_step()
            << "/" << config->batching().tgt_tokens_per_step() << " tokens: " << sampler->batches_per_epoch()
            << " batches per epoch, padding " << 100 * stats.fraction() << "% (source "
            << 100 * (1 - static_cast<double>(stats.src_tokens) / stats.src_padded) << "%, target "
            << 100 * (1 - static_cast<double>(stats.tgt_tokens) / stats.tgt_padded) << "%)\n";
  RecordProperty("padding_fraction", std::to_string(stats.fraction()));
  EXPECT_LT(stats.fraction(), 0.15);
}

proto::JobConfig CopyConfig(uint64_t seed) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_training()->set_seed(seed);
  config.mutable_data()->set_copy_train_size(3000);
  config.mutable_batching()->set_src_tokens_per_step(300);
  config.mutable_batching()->set_tgt_tokens_per_step(300);
  return config;
}

TEST(CopyBatchSource, ServesTheConfiguredCopyTask) {
  auto source = MakeBatchSource(CopyConfig(1));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ((*source)->vocab_size(), 16);
  const Batch b = (*source)->TrainBatch(1, 0, 1);
  ASSERT_GT(b.sentences, 0);
  EXPECT_LE(int64_t{b.sentences} * b.src_len, 300);
  EXPECT_EQ(b.src_len, b.tgt_len);  // copy task: target = source
  // Every validation pair once, in batches that do not change between calls.
  std::set<int64_t> valid_ids;
  int64_t rows = 0;
  for (const Batch& v : (*source)->ValidBatches()) {
    valid_ids.insert(v.pair_ids.begin(), v.pair_ids.end());
    rows += v.sentences;
  }
  EXPECT_EQ(rows, 200);
  EXPECT_EQ(valid_ids.size(), 200u);
}

TEST(CopyBatchSource, SameSeedSameBatchesInAnotherProcessOtherSeedDiffers) {
  auto source = MakeBatchSource(CopyConfig(11));
  ASSERT_TRUE(source.ok());
  const std::string here = testing::DigestSteps(**source, 1, 40, 3);
  const std::string dump = std::string(PSFORMER_DATA_BATCH_DUMP) + " ";
  const auto first = testing::RunShell(dump + "11 3 1 40");
  const auto second = testing::RunShell(dump + "11 3 1 40");
  const auto other = testing::RunShell(dump + "12 3 1 40");
  ASSERT_EQ(first.exit_status, 0) << first.output;
  EXPECT_EQ(first.output, here);
  EXPECT_EQ(second.output, here);
  EXPECT_NE(other.output, here);
  // A process that starts at step 25 agrees with one that went through steps 1..24.
  const auto resumed = testing::RunShell(dump + "11 3 25 40");
  EXPECT_EQ(resumed.output, here.substr(here.find("\n25 0 ") + 1));
}

}  // namespace
}  // namespace psformer
