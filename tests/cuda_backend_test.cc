// Every operation of the CUDA backend against its CPU twin on fresh random inputs: fp32 results
// within 1e-5 (relative to the reference's scale), bf16 matrix products within 1e-2, dropout
// masks identical bit for bit (and equal to DropoutKeep of common/philox.h), and reductions that
// give the same bits when repeated. Each test skips where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/bfloat16.h"
#include "common/philox.h"
#include "tests/cuda_test_util.h"

namespace psformer {
namespace {

using testing::CudaVsCpu;
using testing::RandomFloats;
using testing::RelError;
using testing::ToDevice;
using testing::ToHost;

constexpr double kFp32Tolerance = 1e-5;
constexpr double kBf16Tolerance = 1e-2;

TEST(CudaDevice, CountIsZeroOrCreateSucceeds) {
  // Runs everywhere: without a device, Create must say so instead of crashing.
  if (CudaDeviceCount() == 0) {
    auto created = CudaBackend::Create(CudaBackendOptions{});
    ASSERT_FALSE(created.ok());
    EXPECT_NE(created.status().message().find("no CUDA device"), std::string::npos) << created.status().ToString();
    GTEST_SKIP() << CudaUnavailableReason();
  }
  CudaBackendOptions bad;
  bad.device = CudaDeviceCount();
  auto created = CudaBackend::Create(bad);
  ASSERT_FALSE(created.ok());
  EXPECT_TRUE(created.status().IsInvalidArgument()) << created.status().ToString();
}

class CudaOps : public CudaVsCpu {
 protected:
  // C = alpha op(A) op(B) + beta C on both backends with padded leading dimensions.
  double GemmError(Transpose ta, Transpose tb, GemmMath math, int batch) {
    const int m = 37, n = 29, k = 45;
    const int a_rows = ta == Transpose::kNo ? m : k, a_cols = ta == Transpose::kNo ? k : m;
    const int b_rows = tb == Transpose::kNo ? k : n, b_cols = tb == Transpose::kNo ? n : k;
    const int lda = a_cols + 3, ldb = b_cols + 1, ldc = n + 2;
    const int64_t sa = int64_t{a_rows} * lda, sb = int64_t{b_rows} * ldb, sc = int64_t{m} * ldc;
    auto [ca, ga] = Both(RandomFloats(rng_, sa * batch));
    auto [cb, gb] = Both(RandomFloats(rng_, sb * batch));
    auto [cc, gc] = Both(RandomFloats(rng_, sc * batch));
    gpu_->set_gemm_math(math);
    if (batch == 1) {
      cpu_.Gemm(ta, tb, m, n, k, 0.7f, ca.data(), lda, cb.data(), ldb, 0.3f, cc.data(), ldc);
      gpu_->Gemm(ta, tb, m, n, k, 0.7f, ga.data(), lda, gb.data(), ldb, 0.3f, gc.data(), ldc);
    } else {
      cpu_.GemmStridedBatched(ta, tb, m, n, k, 0.7f, ca.data(), lda, sa, cb.data(), ldb, sb, 0.3f, cc.data(), ldc, sc,
                              batch);
      gpu_->GemmStridedBatched(ta, tb, m, n, k, 0.7f, ga.data(), lda, sa, gb.data(), ldb, sb, 0.3f, gc.data(), ldc, sc,
                               batch);
    }
    gpu_->set_gemm_math(GemmMath::kFp32);
    return RelError(ToHost(gc), ToHost(cc));
  }
};

TEST_F(CudaOps, GemmAllTransposesFp32AndBf16) {
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      SCOPED_TRACE(::testing::Message() << "ta " << (ta == Transpose::kYes) << " tb " << (tb == Transpose::kYes));
      EXPECT_LT(GemmError(ta, tb, GemmMath::kFp32, 1), kFp32Tolerance);
      EXPECT_LT(GemmError(ta, tb, GemmMath::kFp32, 3), kFp32Tolerance);
      EXPECT_LT(GemmError(ta, tb, GemmMath::kBf16, 1), kBf16Tolerance);
      EXPECT_LT(GemmError(ta, tb, GemmMath::kTf32, 3), kBf16Tolerance);
    }
  }
}

TEST_F(CudaOps, Bf16GemmIsNotSilentlyFp32) {
  // Guards the math switch itself: bf16 inputs lose bits that strict fp32 keeps.
  EXPECT_GT(GemmError(Transpose::kNo, Transpose::kNo, GemmMath::kBf16, 1), 1e-5);
}

// Attention's products read heads in place: matrix (i, j) is a block of a wider matrix, so the
// leading dimensions are much larger than the matrices (as Q, K, V inside a (rows, 3d) projection).
TEST_F(CudaOps, TwoLevelBatchedGemmReadsBlocksInPlace) {
  const int len = 7, head_dim = 8, heads = 3, batch = 4;
  const int ld = 3 * heads * head_dim;
  const BatchStrides heads_in_place{int64_t{len} * ld, head_dim};
  const BatchStrides scores{int64_t{heads} * len * len, int64_t{len} * len};
  auto [cq, gq] = Both(RandomFloats(rng_, size_t{batch} * len * ld));
  // Q K^T into (batch, heads, len, len) scores; then scores V into a (batch*len, heads*head_dim) context.
  auto [cs, gs] = Both(RandomFloats(rng_, size_t{batch} * heads * len * len));
  auto [cc, gc] = Both(RandomFloats(rng_, size_t{batch} * len * heads * head_dim));
  for (GemmMath math : {GemmMath::kFp32, GemmMath::kBf16}) {
    gpu_->set_gemm_math(math);
    cpu_.GemmBatched2(Transpose::kNo, Transpose::kYes, len, len, head_dim, 1.0f, cq.data(), ld, heads_in_place,
                      cq.data() + heads * head_dim, ld, heads_in_place, 0.0f, cs.data(), len, scores, batch, heads);
    gpu_->GemmBatched2(Transpose::kNo, Transpose::kYes, len, len, head_dim, 1.0f, gq.data(), ld, heads_in_place,
                       gq.data() + heads * head_dim, ld, heads_in_place, 0.0f, gs.data(), len, scores, batch, heads);
    const double tolerance = math == GemmMath::kFp32 ? kFp32Tolerance : kBf16Tolerance;
    EXPECT_LT(RelError(ToHost(gs), ToHost(cs)), tolerance);
    const int ldctx = heads * head_dim;
    const BatchStrides ctx{int64_t{len} * ldctx, head_dim};
    cpu_.GemmBatched2(Transpose::kNo, Transpose::kNo, len, head_dim, len, 1.0f, cs.data(), len, scores,
                      cq.data() + 2 * heads * head_dim, ld, heads_in_place, 0.0f, cc.data(), ldctx, ctx, batch, heads);
    gpu_->GemmBatched2(Transpose::kNo, Transpose::kNo, len, head_dim, len, 1.0f, gs.data(), len, scores,
                       gq.data() + 2 * heads * head_dim, ld, heads_in_place, 0.0f, gc.data(), ldctx, ctx, batch, heads);
    EXPECT_LT(RelError(ToHost(gc), ToHost(cc)), tolerance);
  }
  gpu_->set_gemm_math(GemmMath::kFp32);
}

// An affine layer's forward with the bias (and ReLU) fused into cuBLASLt's epilogue, against the
// CPU's product + bias + ReLU: odd shapes, and operands at every 4-byte offset from 16-byte
// alignment (parameters sit at arbitrary offsets of the flat vector; a bias off 16 bytes takes
// the unfused path even where fusion is on), fused and unfused.
TEST_F(CudaOps, GemmBiasWithAndWithoutFusedEpilogues) {
  CudaBackendOptions unfused_options;
  unfused_options.fused_epilogues = false;
  auto unfused = CudaBackend::Create(unfused_options);
  ASSERT_TRUE(unfused.ok()) << unfused.status().ToString();
  const int m = 37, n = 29, k = 45;
  const std::vector<float> x = RandomFloats(rng_, m * k + 3), w = RandomFloats(rng_, k * n + 3);
  const std::vector<float> bias = RandomFloats(rng_, n + 3);
  auto cx = ToDevice(&cpu_, x), cw = ToDevice(&cpu_, w), cb = ToDevice(&cpu_, bias);
  for (CudaBackend* gpu : {gpu_.get(), unfused->get()}) {
    auto gx = ToDevice(gpu, x), gw = ToDevice(gpu, w), gb = ToDevice(gpu, bias);
    for (int offset : {0, 1, 2, 3}) {
      for (bool relu : {false, true}) {
        for (GemmMath math : {GemmMath::kFp32, GemmMath::kBf16}) {
          SCOPED_TRACE(::testing::Message() << (gpu == gpu_.get() ? "fused" : "unfused") << " offset " << offset
                                            << " relu " << relu << " " << GemmMathName(math));
          auto cy = cpu_.Allocate<float>(m * n + 3), gy = gpu->Allocate<float>(m * n + 3);
          cpu_.GemmBias(m, n, k, cx.data() + offset, cw.data() + offset, cb.data() + offset, relu, cy.data() + offset);
          gpu->set_gemm_math(math);
          gpu->GemmBias(m, n, k, gx.data() + offset, gw.data() + offset, gb.data() + offset, relu, gy.data() + offset);
          gpu->set_gemm_math(GemmMath::kFp32);
          const std::vector<float> expected = ToHost(cy), got = ToHost(gy);
          EXPECT_LT(RelError(got, expected), math == GemmMath::kFp32 ? kFp32Tolerance : kBf16Tolerance);
          if (relu) {
            EXPECT_GE(*std::min_element(got.begin(), got.end()), 0.0f);
          }
        }
      }
    }
  }
}

TEST_F(CudaOps, MaskedSoftmaxAndBackward) {
  const AttentionShape s{3, 2, 5, 7};
  const size_t n = size_t{3} * 2 * 5 * 7;
  // Sentence 0 unpadded, sentence 1 with two pad keys, sentence 2 all pad (rows become zero).
  std::vector<int32_t> keys = {5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  auto [ck, gk] = Both(keys);
  auto [cs, gs] = Both(RandomFloats(rng_, n, 3.0f));
  auto [cdp, gdp] = Both(RandomFloats(rng_, n));
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    auto cp = cpu_.Allocate<float>(n);
    auto gp = gpu_->Allocate<float>(n);
    cpu_.MaskedSoftmaxForward(s, 0.4f, cs.data(), ck.data(), 0, causal, cp.data());
    gpu_->MaskedSoftmaxForward(s, 0.4f, gs.data(), gk.data(), 0, causal, gp.data());
    const std::vector<float> probs = ToHost(gp);
    EXPECT_LT(RelError(probs, ToHost(cp)), kFp32Tolerance);
    for (size_t i = n * 2 / 3; i < n; ++i) ASSERT_EQ(probs[i], 0.0f) << "all-pad sentence, element " << i;
    auto cds = cpu_.Allocate<float>(n);
    auto gds = gpu_->Allocate<float>(n);
    cpu_.SoftmaxBackward(s, 0.4f, cp.data(), cdp.data(), cds.data());
    gpu_->SoftmaxBackward(s, 0.4f, gp.data(), gdp.data(), gds.data());
    EXPECT_LT(RelError(ToHost(gds), ToHost(cds)), kFp32Tolerance);
  }
}

TEST_F(CudaOps, SplitAndMergeHeadsAreExactCopies) {
  const int batch = 2, len = 5, heads = 3, head_dim = 4, ld = 3 * heads * head_dim + 2, column = heads * head_dim;
  auto [cx, gx] = Both(RandomFloats(rng_, size_t{batch} * len * ld));
  const size_t n = size_t{batch} * heads * len * head_dim;
  auto co = cpu_.Allocate<float>(n);
  auto go = gpu_->Allocate<float>(n);
  cpu_.SplitHeads(cx.data(), ld, column, batch, len, heads, head_dim, co.data());
  gpu_->SplitHeads(gx.data(), ld, column, batch, len, heads, head_dim, go.data());
  EXPECT_EQ(ToHost(go), ToHost(co));
  auto [cm, gm] = Both(RandomFloats(rng_, size_t{batch} * len * ld));
  cpu_.MergeHeads(co.data(), batch, len, heads, head_dim, cm.data(), ld, column);
  gpu_->MergeHeads(go.data(), batch, len, heads, head_dim, gm.data(), ld, column);
  EXPECT_EQ(ToHost(gm), ToHost(cm));
}

TEST_F(CudaOps, LayerNormForwardAndBackward) {
  const int rows = 150, dim = 100;  // rows span several column-sum chunks; dim not a multiple of 32
  const size_t n = size_t{rows} * dim;
  auto [cx, gx] = Both(RandomFloats(rng_, n, 2.0f));
  std::vector<float> gamma = RandomFloats(rng_, dim, 0.3f);
  for (float& g : gamma) g += 1.0f;
  auto [cg, gg] = Both(gamma);
  auto [cb, gb] = Both(RandomFloats(rng_, dim));
  auto cy = cpu_.Allocate<float>(n), cmean = cpu_.Allocate<float>(rows), crstd = cpu_.Allocate<float>(rows);
  auto gy = gpu_->Allocate<float>(n), gmean = gpu_->Allocate<float>(rows), grstd = gpu_->Allocate<float>(rows);
  cpu_.LayerNormForward(rows, dim, 1e-6f, cx.data(), cg.data(), cb.data(), cy.data(), cmean.data(), crstd.data());
  gpu_->LayerNormForward(rows, dim, 1e-6f, gx.data(), gg.data(), gb.data(), gy.data(), gmean.data(), grstd.data());
  EXPECT_LT(RelError(ToHost(gy), ToHost(cy)), kFp32Tolerance);
  EXPECT_LT(RelError(ToHost(gmean), ToHost(cmean)), kFp32Tolerance);
  EXPECT_LT(RelError(ToHost(grstd), ToHost(crstd)), kFp32Tolerance);

  auto [cdy, gdy] = Both(RandomFloats(rng_, n));
  // Parameter gradients accumulate onto what is there.
  const std::vector<float> start = RandomFloats(rng_, dim);
  auto [cdg, gdg] = Both(start);
  auto [cdb, gdb] = Both(start);
  auto cdx = cpu_.Allocate<float>(n);
  auto gdx = gpu_->Allocate<float>(n);
  cpu_.LayerNormBackward(rows, dim, cdy.data(), cx.data(), cg.data(), cmean.data(), crstd.data(), cdx.data(),
                         cdg.data(), cdb.data());
  gpu_->LayerNormBackward(rows, dim, gdy.data(), gx.data(), gg.data(), gmean.data(), grstd.data(), gdx.data(),
                          gdg.data(), gdb.data());
  EXPECT_LT(RelError(ToHost(gdx), ToHost(cdx)), kFp32Tolerance);
  EXPECT_LT(RelError(ToHost(gdg), ToHost(cdg)), kFp32Tolerance);
  EXPECT_LT(RelError(ToHost(gdb), ToHost(cdb)), kFp32Tolerance);
}

TEST_F(CudaOps, DropoutMasksAreIdenticalToCpuAndPhilox) {
  const size_t n = 4099;  // not a multiple of 4: the last Philox call serves three elements
  const DropoutKey key{0x123456789abcdefull, 17, 3};
  const std::vector<float> x = RandomFloats(rng_, n);
  for (float p : {0.0f, 0.1f, 0.5f}) {
    SCOPED_TRACE(p);
    auto [cx, gx] = Both(x);
    auto cy = cpu_.Allocate<float>(n), cm = cpu_.Allocate<float>(n);
    auto gm = gpu_->Allocate<float>(n);
    cpu_.DropoutForward(n, p, key, 42, cx.data(), cy.data(), cm.data());
    gpu_->DropoutForward(n, p, key, 42, gx.data(), gx.data(), gm.data());  // in place
    const std::vector<float> mask = ToHost(gm);
    EXPECT_EQ(mask, ToHost(cm));
    EXPECT_EQ(ToHost(gx), ToHost(cy));
    size_t dropped = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(mask[i] != 0.0f, DropoutKeep(key, 42, i, p)) << "element " << i;
      dropped += mask[i] == 0.0f;
    }
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.03);
  }
}

// The gradient's bf16 rounding on the GPU (a worker with cluster.gradient_dtype BF16) gives the
// bits the host's FloatsToBf16 gives, ties to even, NaN, infinities and denormals included; the
// parameters' widening (param_dtype BF16) gives the host's Bf16ToFloats.
TEST_F(CudaOps, RoundToBf16AndWidenBf16AreTheHostsBitForBit) {
  EXPECT_TRUE(gpu_->rounds_on_device());
  std::vector<float> x = RandomFloats(rng_, 10007);
  const uint32_t special[] = {0x7fc00001u, 0xff800000u, 0x7f800000u, 0x00000001u, 0x80000000u,
                              0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x3f80ffffu};
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); ++i) std::memcpy(&x[i], &special[i], 4);
  std::vector<uint16_t> expected(x.size());
  FloatsToBf16(x.data(), x.size(), expected.data());
  auto gx = ToDevice(gpu_.get(), x);
  auto g16 = gpu_->Allocate<uint16_t>(x.size());
  gpu_->RoundToBf16(x.size(), gx.data(), g16.data());
  EXPECT_EQ(ToHost(g16), expected);
  // And back: widening is exact, and the host's.
  std::vector<float> widened(x.size());
  Bf16ToFloats(expected.data(), expected.size(), widened.data());
  auto gw = gpu_->Allocate<float>(x.size());
  gpu_->WidenBf16(x.size(), g16.data(), gw.data());
  const std::vector<float> back = ToHost(gw);
  ASSERT_EQ(back.size(), widened.size());
  EXPECT_EQ(std::memcmp(back.data(), widened.data(), back.size() * sizeof(float)), 0);  // NaN bits too
}

TEST_F(CudaOps, EmbeddingForwardAndDeterministicBackward) {
  const int vocab = 13, dim = 24, len = 6;
  const size_t n = 4 * len;
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  for (auto& id : ids) id = token(rng_) % 5;  // few distinct ids: many repeats per row
  ids[3] = vocab - 1;
  auto [cids, gids] = Both(ids);
  auto [ct, gt] = Both(RandomFloats(rng_, size_t{vocab} * dim));
  for (int l : {0, len}) {
    auto co = cpu_.Allocate<float>(n * dim);
    auto go = gpu_->Allocate<float>(n * dim);
    cpu_.EmbeddingForward(n, dim, ct.data(), cids.data(), 2.5f, l, co.data());
    gpu_->EmbeddingForward(n, dim, gt.data(), gids.data(), 2.5f, l, go.data());
    EXPECT_LT(RelError(ToHost(go), ToHost(co)), kFp32Tolerance) << "len " << l;
  }
  auto [cdo, gdo] = Both(RandomFloats(rng_, n * dim));
  const std::vector<float> start = RandomFloats(rng_, size_t{vocab} * dim);
  auto [cdt, gdt] = Both(start);
  cpu_.EmbeddingBackward(n, dim, cdo.data(), cids.data(), 2.5f, cdt.data());
  gpu_->EmbeddingBackward(n, dim, gdo.data(), gids.data(), 2.5f, gdt.data());
  const std::vector<float> first = ToHost(gdt);
  EXPECT_LT(RelError(first, ToHost(cdt)), kFp32Tolerance);
  // Again from the same start: the same bits (no timing-dependent order).
  gdt.Upload(start.data(), start.size());
  gpu_->EmbeddingBackward(n, dim, gdo.data(), gids.data(), 2.5f, gdt.data());
  EXPECT_EQ(ToHost(gdt), first);
}

TEST_F(CudaOps, ElementwiseOperations) {
  const size_t n = 3001;
  const std::vector<float> x = RandomFloats(rng_, n), y = RandomFloats(rng_, n);
  auto [cx, gx] = Both(x);
  auto [cy, gy] = Both(y);
  auto cz = cpu_.Allocate<float>(n);
  auto gz = gpu_->Allocate<float>(n);
  cpu_.Fill(n, 0.25f, cz.data());
  gpu_->Fill(n, 0.25f, gz.data());
  EXPECT_EQ(ToHost(gz), ToHost(cz));
  cpu_.Add(n, cx.data(), cy.data(), cz.data());
  gpu_->Add(n, gx.data(), gy.data(), gz.data());
  EXPECT_EQ(ToHost(gz), ToHost(cz));
  cpu_.Accumulate(n, cx.data(), cz.data());
  gpu_->Accumulate(n, gx.data(), gz.data());
  EXPECT_EQ(ToHost(gz), ToHost(cz));
  cpu_.Multiply(n, cx.data(), cy.data(), cz.data());
  gpu_->Multiply(n, gx.data(), gy.data(), gz.data());
  EXPECT_EQ(ToHost(gz), ToHost(cz));
  cpu_.ReluForward(n, cx.data(), cz.data());
  gpu_->ReluForward(n, gx.data(), gz.data());
  EXPECT_EQ(ToHost(gz), ToHost(cz));
  cpu_.ReluBackward(n, cz.data(), cy.data(), cy.data());  // dx aliases dy
  gpu_->ReluBackward(n, gz.data(), gy.data(), gy.data());
  EXPECT_EQ(ToHost(gy), ToHost(cy));
  cpu_.Copy(n, cx.data(), cz.data());
  gpu_->Copy(n, gx.data(), gz.data());
  EXPECT_EQ(ToHost(gz), x);
}

TEST_F(CudaOps, BiasAddAndBackward) {
  const int rows = 300, cols = 70;
  auto [cx, gx] = Both(RandomFloats(rng_, size_t{rows} * cols));
  auto [cb, gb] = Both(RandomFloats(rng_, cols));
  cpu_.BiasAdd(rows, cols, cb.data(), cx.data());
  gpu_->BiasAdd(rows, cols, gb.data(), gx.data());
  EXPECT_EQ(ToHost(gx), ToHost(cx));
  cpu_.BiasBackward(rows, cols, cx.data(), cb.data());
  gpu_->BiasBackward(rows, cols, gx.data(), gb.data());
  EXPECT_LT(RelError(ToHost(gb), ToHost(cb)), kFp32Tolerance);
}

TEST_F(CudaOps, SumInDouble) {
  const std::vector<float> x = RandomFloats(rng_, 100003);
  double expected = 0;
  for (float v : x) expected += v;
  auto g = ToDevice(gpu_.get(), x);
  const double first = gpu_->Sum(x.size(), g.data());
  EXPECT_NEAR(first, expected, 1e-9 * std::max(1.0, std::abs(expected)));
  EXPECT_EQ(gpu_->Sum(x.size(), g.data()), first);
  EXPECT_EQ(gpu_->Sum(0, g.data()), 0.0);
  // Two sums fetched in one copy (the loss and the accuracy after forward) are each Sum's bits.
  const std::vector<float> y = RandomFloats(rng_, x.size());
  auto gy = ToDevice(gpu_.get(), y);
  const auto [sx, sy] = gpu_->SumPair(x.size(), g.data(), gy.data());
  EXPECT_EQ(sx, first);
  EXPECT_EQ(sy, gpu_->Sum(y.size(), gy.data()));
  EXPECT_NE(sx, sy);
}

TEST_F(CudaOps, CrossEntropyLossCorrectAndGradient) {
  const int rows = 9, vocab = 1237;
  const float eps = 0.1f;
  std::vector<float> logits = RandomFloats(rng_, size_t{rows} * vocab, 2.0f);
  std::vector<int32_t> targets = {7, 0, 1236, 3, 0, 500, 42, 42, 9};  // pad_id 0: rows 1 and 4 count nothing
  // Row 2: its target is the (tied) maximum at two places; the first one wins.
  logits[size_t{2} * vocab + 1236] = 50.0f;
  logits[size_t{2} * vocab + 100] = 50.0f;
  // Row 3: the target is the unique maximum.
  logits[size_t{3} * vocab + 3] = 40.0f;
  auto [cl, gl] = Both(logits);
  auto [ct, gt] = Both(targets);
  for (bool aliased : {false, true}) {
    SCOPED_TRACE(aliased ? "dlogits aliases logits" : "separate dlogits");
    auto closs = cpu_.Allocate<float>(rows), ccorrect = cpu_.Allocate<float>(rows);
    auto gloss = gpu_->Allocate<float>(rows), gcorrect = gpu_->Allocate<float>(rows);
    auto cd = cpu_.Allocate<float>(logits.size());
    auto gd = gpu_->Allocate<float>(logits.size());
    if (aliased) {
      cd.Upload(logits.data(), logits.size());
      gd.Upload(logits.data(), logits.size());
    }
    cpu_.CrossEntropy(rows, vocab, eps, aliased ? cd.data() : cl.data(), ct.data(), 0, closs.data(), ccorrect.data(),
                      cd.data());
    gpu_->CrossEntropy(rows, vocab, eps, aliased ? gd.data() : gl.data(), gt.data(), 0, gloss.data(), gcorrect.data(),
                       gd.data());
    const std::vector<float> loss = ToHost(gloss), correct = ToHost(gcorrect);
    EXPECT_LT(RelError(loss, ToHost(closs)), kFp32Tolerance);
    EXPECT_EQ(correct, ToHost(ccorrect));
    EXPECT_EQ(loss[1], 0.0f);
    EXPECT_EQ(correct[2], 0.0f);  // argmax is 100, the first of the tied maxima
    EXPECT_EQ(correct[3], 1.0f);
    EXPECT_LT(RelError(ToHost(gd), ToHost(cd)), kFp32Tolerance);
  }
  // Without a gradient buffer the loss is the same.
  auto gloss = gpu_->Allocate<float>(rows), gcorrect = gpu_->Allocate<float>(rows);
  auto closs = cpu_.Allocate<float>(rows), ccorrect = cpu_.Allocate<float>(rows);
  gpu_->CrossEntropy(rows, vocab, eps, gl.data(), gt.data(), 0, gloss.data(), gcorrect.data(), nullptr);
  cpu_.CrossEntropy(rows, vocab, eps, cl.data(), ct.data(), 0, closs.data(), ccorrect.data(), nullptr);
  EXPECT_LT(RelError(ToHost(gloss), ToHost(closs)), kFp32Tolerance);
}

TEST_F(CudaOps, CachingAllocatorReusesFreedBlocks) {
  { auto a = gpu_->Allocate<float>(1 << 20); }
  const size_t before = gpu_->memory_stats().device_allocations;
  for (int i = 0; i < 10; ++i) {
    auto a = gpu_->Allocate<float>((1 << 20) - 7 * i);  // slightly different sizes share the block
    std::vector<float> host = ToHost(a);
    ASSERT_TRUE(std::all_of(host.begin(), host.end(), [](float v) { return v == 0.0f; })) << "zero-filled";
    gpu_->Fill(a.size(), 1.0f, a.data());
  }
  EXPECT_EQ(gpu_->memory_stats().device_allocations, before);
}

// Staged copies (the batch's token ids) keep the stream's order with the kernels around them,
// and the host array may be written again as soon as StageToDevice returns: each buffer holds
// what the array held at its call. Blocks are reused once their copies are done, and a busy one
// is passed over without leaving an error for the next kernel launch.
TEST_F(CudaOps, StagedCopiesKeepStreamOrderAndFreeTheHostArrayAtOnce) {
  constexpr size_t kN = 50000;  // 200 KB: more than one staging block's minimum
  std::vector<DeviceBuffer<int32_t>> bufs;
  std::vector<int32_t> host(kN);
  for (int b = 0; b < 4; ++b) bufs.push_back(gpu_->Allocate<int32_t>(kN));
  {
    // The stream kept busy (200 passes over 1 GiB: ~45 ms at an H200's 4.8 TB/s, ~65 ms on an
    // H100) so that the copies wait behind it, however long the four pinned allocations take:
    // each Stage after the first finds the blocks before it still to be copied.
    auto busy = gpu_->Allocate<float>(size_t{1} << 28);
    for (int i = 0; i < 200; ++i) gpu_->Fill(busy.size(), 1.0f, busy.data());
    for (int b = 0; b < 4; ++b) {
      std::iota(host.begin(), host.end(), b * 1000);
      bufs[b].Stage(host.data(), kN);
    }
    EXPECT_EQ(gpu_->staging_blocks(), 4u) << "a block still being copied was taken again";
    std::fill(host.begin(), host.end(), -1);  // written again before the device took the copies
    // A Stage that passed over a busy block (cudaEventQuery: not ready) leaves no error behind
    // for the next launch's check to take as its own (it aborted here).
    auto after = gpu_->Allocate<float>(16);
    gpu_->Fill(after.size(), 2.0f, after.data());
    gpu_->Synchronize();
  }
  for (int b = 0; b < 4; ++b) {
    std::vector<int32_t> got(kN), want(kN);
    std::iota(want.begin(), want.end(), b * 1000);
    bufs[b].Download(got.data(), kN);
    EXPECT_EQ(got, want) << "buffer " << b;
  }
  // Behind a kernel on the same memory, and before one: the stream's order decides.
  auto x = gpu_->Allocate<float>(kN);
  std::vector<float> ones(kN, 1.0f);
  gpu_->Fill(kN, 5.0f, x.data());
  x.Stage(ones.data(), kN);
  EXPECT_EQ(ToHost(x), ones);
  x.Stage(ones.data(), kN);
  gpu_->Fill(kN, 5.0f, x.data());
  EXPECT_EQ(ToHost(x), std::vector<float>(kN, 5.0f));
  // Every step the same few copies: a block is reused once its copy is done, so there are never
  // more blocks than copies in flight at once (4 here).
  for (int step = 0; step < 20; ++step) {
    for (int b = 0; b < 4; ++b) bufs[b].Stage(host.data(), kN);
    gpu_->Synchronize();
  }
  EXPECT_GE(gpu_->staging_blocks(), 1u);
  EXPECT_LE(gpu_->staging_blocks(), 4u);
}

}  // namespace
}  // namespace psformer
