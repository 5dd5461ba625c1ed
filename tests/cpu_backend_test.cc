// The CPU backend's thread pool and the properties the model relies on: every index visited
// exactly once, and loop results independent of the thread count.
#include "worker/backend/cpu_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "tests/device_test_util.h"
#include "tests/model_test_util.h"
#include "worker/backend/thread_pool.h"
#include "worker/model/transformer.h"

namespace psformer {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceForManySizes) {
  for (int threads : {1, 2, 3}) {
    // A fresh pool each time: its workers start while the constructor is still running.
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 1000, 1023, 2046}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
        ASSERT_LE(0, begin);
        ASSERT_LE(end, n);
        for (int64_t i = begin; i < end; ++i) visits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[i].load(), 1) << "n " << n << " i " << i;
    }
  }
}

TEST(CpuBackend, LoopResultsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int rows = 300, dim = 256;  // large enough that loops split across threads
  std::vector<float> x(rows * dim), dy(rows * dim), gamma(dim), beta(dim);
  for (auto* v : {&x, &dy, &gamma, &beta}) {
    for (float& f : *v) f = normal(rng);
  }
  auto run = [&](int threads) {
    CpuBackend<float> be(threads);
    std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dgamma(dim), dbeta(dim);
    be.LayerNormForward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data());
    be.LayerNormBackward(rows, dim, dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                         dgamma.data(), dbeta.data());
    std::vector<int32_t> ids(rows);
    for (int i = 0; i < rows; ++i) ids[i] = i % 7;
    std::vector<float> table(7 * dim, 0.0f);
    be.EmbeddingBackward(rows, dim, dy.data(), ids.data(), 2.0f, table.data());
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dgamma.begin(), dgamma.end());
    y.insert(y.end(), table.begin(), table.end());
    return y;
  };
  EXPECT_EQ(run(1), run(2));
  EXPECT_EQ(run(1), run(3));
}

// GemmBatched2 (attention reads its heads in place with it) does the products one Gemm per
// matrix would, for either level the longer, and leaves the rest of C alone.
TEST(CpuBackend, TwoLevelBatchedGemmIsOneGemmPerMatrix) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int m = 4, n = 3, k = 6;
  for (auto [outer, inner] : {std::pair{3, 2}, std::pair{2, 5}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        SCOPED_TRACE(::testing::Message() << outer << "x" << inner << " ta " << (ta == Transpose::kYes) << " tb "
                                          << (tb == Transpose::kYes));
        // Matrix (i, j) is the block of rows i*rows.. and columns j*cols.. of a wider matrix.
        const int a_rows = ta == Transpose::kNo ? m : k, a_cols = ta == Transpose::kNo ? k : m;
        const int b_rows = tb == Transpose::kNo ? k : n, b_cols = tb == Transpose::kNo ? n : k;
        const int lda = inner * a_cols + 2, ldb = inner * b_cols + 1, ldc = inner * n + 3;
        const BatchStrides sa{int64_t{a_rows} * lda, a_cols}, sb{int64_t{b_rows} * ldb, b_cols};
        const BatchStrides sc{int64_t{m} * ldc, n};
        std::vector<float> a(outer * a_rows * lda), b(outer * b_rows * ldb), c(outer * m * ldc);
        for (auto* v : {&a, &b, &c}) {
          for (float& f : *v) f = normal(rng);
        }
        CpuBackend<float> be(1);
        std::vector<float> expected = c;
        for (int i = 0; i < outer; ++i) {
          for (int j = 0; j < inner; ++j) {
            be.Gemm(ta, tb, m, n, k, 0.7f, a.data() + i * sa.outer + j * sa.inner, lda,
                    b.data() + i * sb.outer + j * sb.inner, ldb, 0.5f, expected.data() + i * sc.outer + j * sc.inner,
                    ldc);
          }
        }
        be.GemmBatched2(ta, tb, m, n, k, 0.7f, a.data(), lda, sa, b.data(), ldb, sb, 0.5f, c.data(), ldc, sc, outer,
                        inner);
        EXPECT_EQ(c, expected);
      }
    }
  }
}

TEST(CpuBackend, MaskedSoftmaxIgnoresPaddingAndTheFuture) {
  CpuBackend<double> be(1);
  const AttentionShape shape{1, 1, 3, 3};
  const std::vector<double> scores = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> keys = {5, 6, 0};  // the third key is padding
  std::vector<double> probs(9);
  be.MaskedSoftmaxForward(shape, 1.0, scores.data(), keys.data(), 0, /*causal=*/true, probs.data());
  EXPECT_DOUBLE_EQ(probs[0], 1.0);  // query 0 sees key 0 only
  EXPECT_DOUBLE_EQ(probs[1], 0.0);
  EXPECT_NEAR(probs[3], 1.0 / (1.0 + std::exp(1.0)), 1e-15);
  EXPECT_DOUBLE_EQ(probs[8], 0.0);  // padding, though not in the future
  EXPECT_NEAR(probs[6] + probs[7], 1.0, 1e-15);
}

// Counts device allocations, to check the model's workspace contract.
class CountingBackend : public CpuBackend<float> {
 public:
  CountingBackend() : CpuBackend<float>(1) {}
  void* AllocateBytes(size_t bytes) override {
    ++allocations;
    return CpuBackend<float>::AllocateBytes(bytes);
  }
  int allocations = 0;
};

TEST(Transformer, AllocatesNothingOnceBatchShapesRepeat) {
  CountingBackend be;
  const auto config = testing::SmallModel(2, 16, 32, 2, true, 0.1f);
  Transformer<float> model(config, 13, &be);
  std::vector<float> params(model.parameter_count(), 0.01f), grad(params.size());
  std::mt19937_64 rng(4);
  const Batch big = testing::RandomBatch(rng, 4, 9, 8, 13);
  const Batch small = testing::RandomBatch(rng, 3, 5, 6, 13);
  model.ForwardBackward(params.data(), big, DropoutKey{1, 1, 0}, grad.data());
  EXPECT_GT(be.allocations, 0);
  be.allocations = 0;
  model.ForwardBackward(params.data(), big, DropoutKey{1, 2, 0}, grad.data());
  model.ForwardBackward(params.data(), small, DropoutKey{1, 3, 0}, grad.data());
  model.Evaluate(params.data(), small);
  EXPECT_EQ(be.allocations, 0);
}

// The worker's gradient copies on the CPU: each range is copied when it is started (as the
// worker's synchronous download did), and WaitOldest returns the ranges started, in order, at
// once. Nothing outside a started range is written.
TEST(CpuBackend, RangeDownloaderCopiesEachRangeWhenStarted) {
  CpuBackend<float> be(1);
  std::vector<float> values(10);
  std::iota(values.begin(), values.end(), 1.0f);
  DeviceBuffer<float> device = testing::ToDevice(&be, values);
  std::vector<float> host(values.size(), -1.0f);
  auto made = be.MakeRangeDownloader(device.data(), host.data(), host.size());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<RangeDownloader> downloader = std::move(made).value();
  downloader->Start(6, 10);
  EXPECT_EQ(host, (std::vector<float>{-1, -1, -1, -1, -1, -1, 7, 8, 9, 10}));
  downloader->Start(2, 2);
  downloader->Start(0, 3);
  EXPECT_TRUE(downloader->WaitOldest() == (ElementRange{6, 10}));
  EXPECT_TRUE(downloader->WaitOldest() == (ElementRange{2, 2}));
  EXPECT_TRUE(downloader->WaitOldest() == (ElementRange{0, 3}));
  EXPECT_EQ(host, (std::vector<float>{1, 2, 3, -1, -1, -1, 7, 8, 9, 10}));
  downloader->Start(3, 6);
  EXPECT_TRUE(downloader->WaitOldest() == (ElementRange{3, 6}));
  EXPECT_EQ(host, values);
}

// A downloader that records its copies' block CRCs (RangeDownloader::RecordBlockCrcs): once a
// range is returned, the CRC of any stretch inside it is known and right, and the bytes copied
// are the device's; bytes of ranges not yet copied are unknown.
TEST(RangeDownloader, RecordsTheBlockCrcsOfWhatItCopies) {
  CpuBackend<float> be(1);
  std::vector<float> values(10 * 1024 + 300);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  DeviceBuffer<float> device = testing::ToDevice(&be, values);
  std::vector<float> host(values.size(), 0.0f);
  auto made = be.MakeRangeDownloader(device.data(), host.data(), host.size());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<RangeDownloader> downloader = std::move(made).value();
  BlockCrcs* crcs = downloader->RecordBlockCrcs();
  ASSERT_NE(crcs, nullptr);
  const auto crc_of = [&](size_t b, size_t e) { return crcs->Crc32cOf(host.data() + b, (e - b) * sizeof(float)); };
  for (const ElementRange r : {ElementRange{0, 3000}, ElementRange{3000, 3001}, ElementRange{3001, values.size()}}) {
    downloader->Start(r.begin, r.end);
    ASSERT_TRUE(downloader->WaitOldest() == r);
  }
  EXPECT_EQ(host, values);
  for (const ElementRange r : {ElementRange{0, 3000}, ElementRange{100, 2900}, ElementRange{3001, values.size()},
                               ElementRange{0, values.size()}}) {
    const std::optional<uint32_t> crc = crc_of(r.begin, r.end);
    ASSERT_TRUE(crc.has_value()) << r.begin << ".." << r.end;
    EXPECT_EQ(*crc, Crc32c(0, host.data() + r.begin, (r.end - r.begin) * sizeof(float))) << r.begin << ".." << r.end;
  }
  // Block 2 (elements 2048..3072) lies across three copies: recorded by none, so unknown alone.
  EXPECT_FALSE(crc_of(2040, 3080));
}

// InChunks: consecutive parts of at most `most`, the last the remainder; none for an empty
// range; one for a range that fits, however large `most` is.
TEST(RangeDownloader, InChunksCutsARangeIntoConsecutivePartsOfAtMostMost) {
  EXPECT_EQ(InChunks({10, 35}, 10), (std::vector<ElementRange>{{10, 20}, {20, 30}, {30, 35}}));
  EXPECT_EQ(InChunks({0, 20}, 10), (std::vector<ElementRange>{{0, 10}, {10, 20}}));
  EXPECT_TRUE(InChunks({7, 7}, 3).empty());
  EXPECT_EQ(InChunks({5, 9}, ~uint64_t{0}), (std::vector<ElementRange>{{5, 9}}));
  EXPECT_EQ(InChunks({~uint64_t{0} - 5, ~uint64_t{0}}, 4),
            (std::vector<ElementRange>{{~uint64_t{0} - 5, ~uint64_t{0} - 1}, {~uint64_t{0} - 1, ~uint64_t{0}}}));
}

}  // namespace
}  // namespace psformer
