// The emulated GPU (worker/emulated_gpu.h): which ranges it releases, in what order, and what its
// gradients depend on. Not timed.
#include "worker/emulated_gpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "common/bfloat16.h"
#include "common/block_crcs.h"
#include "common/config_loader.h"
#include "common/crc32c.h"
#include "common/param_layout.h"

namespace psformer {
namespace {

proto::JobConfig Config(proto::ModelConfig::NormPosition norm) {
  auto config = ParseConfigText("", "test");
  EXPECT_TRUE(config.ok());
  FillDefaults(&*config);
  auto& m = *config->mutable_model();
  m.set_layers(2);
  m.set_d_model(16);
  m.set_d_ff(32);
  m.set_heads(2);
  m.set_vocab_size(40);
  m.set_norm_position(norm);
  config->mutable_cluster()->set_backend(proto::ClusterConfig::EMULATED);
  config->mutable_cluster()->set_emulated_step_ms(3);
  config->mutable_cluster()->set_workers(3);
  config->mutable_batching()->set_tgt_tokens_per_step(100);
  return *config;
}

TEST(EmulatedGpu, ReleasesEveryLayerOnceLastLayerFirstCoveringTheVector) {
  for (auto norm : {proto::ModelConfig::POST_LN, proto::ModelConfig::PRE_LN}) {
    const proto::JobConfig config = Config(norm);
    const ParamLayout layout(config.model(), 40);
    EmulatedGpu gpu(config, 0);
    ASSERT_EQ(gpu.parameter_count(), layout.total_size());
    // Decoder layers (and final norm) first, the embedding at offset 0 last, and no gaps.
    const auto& ranges = gpu.ranges();
    const size_t layers = 2 * 2 + 1 + (norm == proto::ModelConfig::PRE_LN ? 2 : 0);
    ASSERT_EQ(ranges.size(), layers);
    EXPECT_EQ(ranges.front().second, layout.total_size());
    EXPECT_EQ(ranges.back(), std::make_pair(uint64_t{0}, layout.Get("embedding").size()));
    EXPECT_EQ(ranges[norm == proto::ModelConfig::PRE_LN ? 1 : 0].first, layout.Get("decoder.1.self_attn.w_qkv").offset);
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].second, ranges[i - 1].first);

    std::vector<float> params(gpu.parameter_count(), 0.5f), grad(gpu.parameter_count(), 7.0f);
    std::vector<std::pair<uint64_t, uint64_t>> reported;
    const StepStats stats = gpu.Step(4, ParameterDigest(params.data(), params.size()), grad.data(), nullptr,
                                     [&](uint64_t b, uint64_t e, const StepStats&) {
                                       reported.push_back({b, e});
                                     });
    EXPECT_EQ(reported, ranges);
    // The downloads land in launch order (and before grad goes).
    for (const auto& range : ranges)
      EXPECT_TRUE(gpu.copies().WaitOldest() == (ElementRange{range.first, range.second}));
    EXPECT_EQ(stats.target_tokens, 34);  // 100 tokens over 3 workers: 34, 33, 33
    EXPECT_EQ(EmulatedGpu(config, 2).Step(4, ParameterDigest(params.data(), params.size()), grad.data()).target_tokens,
              33);
  }
}

// Backward's time: the output projection's two products first (the embedding's share), then each
// layer's share in release order; the embedding's range final at the end, or, split, its dense
// part after the first product.
TEST(EmulatedGpu, BackwardBeginsWithTheOutputProjection) {
  for (const auto& [split, block_count] : {std::pair{false, 8}, std::pair{true, 8}, std::pair{true, 1}}) {
    SCOPED_TRACE(split ? "split, " + std::to_string(block_count) + " blocks" : "whole");
    proto::JobConfig config = Config(proto::ModelConfig::POST_LN);
    config.mutable_cluster()->set_split_embedding(split);
    config.mutable_cluster()->set_output_projection_blocks(block_count);
    const EmulatedGpu gpu(config, 0);
    const auto& ranges = gpu.ranges();
    const std::vector<double>& at = gpu.release_at();
    ASSERT_EQ(at.size(), ranges.size());
    const double n = static_cast<double>(gpu.parameter_count());
    const uint64_t width = config.model().d_model();
    const uint64_t embedding_size = 40 * width;
    const double embedding = static_cast<double>(embedding_size);
    // Split: the embedding's dense part in blocks of rows through the first product, each final
    // at its share of it; whole: one range, final at the end.
    const std::vector<std::pair<int, int>> blocks = OutputProjectionBlocks(40, block_count);
    const size_t e_first = split ? 0 : ranges.size() - 1, e_end = split ? blocks.size() : ranges.size();
    ASSERT_EQ(ranges[e_first].first, 0u);
    ASSERT_EQ(ranges[e_end - 1].second, embedding_size);
    if (split) {
      ASSERT_EQ(blocks.size(), static_cast<size_t>(block_count));
      for (size_t b = 0; b < blocks.size(); ++b) {
        EXPECT_EQ(ranges[b], std::make_pair(blocks[b].first * width, blocks[b].second * width));
        EXPECT_DOUBLE_EQ(at[b], std::floor(embedding / 2) * blocks[b].second / 40 / n) << "block " << b;
        if (b > 0) {
          EXPECT_GT(at[b], at[b - 1]);
        }
      }
    } else {
      EXPECT_DOUBLE_EQ(at[e_first], 1.0);
    }
    double done = embedding;
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (i >= e_first && i < e_end) continue;
      done += static_cast<double>(ranges[i].second - ranges[i].first);
      EXPECT_DOUBLE_EQ(at[i], done / n) << "range " << i;
      if (i > 0) {
        EXPECT_GT(at[i], at[i - 1]);
      }
    }
    EXPECT_DOUBLE_EQ(done, n);
  }
}

TEST(EmulatedGpu, GradientIsAFunctionOfStepWorkerRangeAndPulledParameters) {
  const proto::JobConfig config = Config(proto::ModelConfig::POST_LN);
  const uint64_t n = EmulatedGpu(config, 0).parameter_count();
  std::vector<float> params(n, 0.25f);
  auto step = [&](int worker, int64_t t) {
    std::vector<float> grad(n, 0.0f);
    EmulatedGpu(config, worker).Step(t, ParameterDigest(params.data(), n), grad.data());
    return grad;
  };
  const std::vector<float> a = step(1, 5);
  EXPECT_EQ(a, step(1, 5));  // deterministic, in a fresh instance
  for (float g : a) ASSERT_TRUE(g >= -1.0f && g < 1.0f) << g;
  EXPECT_NE(a, step(0, 5));
  EXPECT_NE(a, step(1, 6));
  params[n / 2] += 1.0f;  // one pulled value differs: every layer's gradient does
  const std::vector<float> b = step(1, 5);
  EXPECT_NE(std::vector<float>(a.begin(), a.begin() + 100), std::vector<float>(b.begin(), b.begin() + 100));
  EXPECT_NE(std::vector<float>(a.end() - 100, a.end()), std::vector<float>(b.end() - 100, b.end()));

  // A range's values depend on where the range begins, not only on the element.
  const EmulatedGradientKey key{1, 5, 1, ParameterDigest(params.data(), n)};
  std::vector<float> whole(64), split(64);
  FillEmulatedGradient(key, 0, 64, whole.data());
  FillEmulatedGradient(key, 0, 30, split.data());
  FillEmulatedGradient(key, 30, 64, split.data());
  EXPECT_EQ(std::vector<float>(whole.begin(), whole.begin() + 30),
            std::vector<float>(split.begin(), split.begin() + 30));
  EXPECT_NE(std::vector<float>(whole.begin() + 30, whole.end()), std::vector<float>(split.begin() + 30, split.end()));
}

// The copies are paced at cluster.emulated_copy_gb_per_s: a step that uploads every parameter
// and downloads every gradient takes at least those two copies' time on top of the step's (a
// lower bound the engine's sleeps guarantee; no upper bound is asserted on a shared machine).
// The device time it reports is the step's and the upload's.
TEST(EmulatedGpu, CopiesTakeTheirBytesOverTheCopyRate) {
  proto::JobConfig config = Config(proto::ModelConfig::POST_LN);
  const uint64_t n = EmulatedGpu(config, 0).parameter_count();
  // A rate at which one copy of every parameter takes 100 ms.
  config.mutable_cluster()->set_emulated_copy_gb_per_s(static_cast<float>(n * sizeof(float) / 0.1 / 1e9));
  EmulatedGpu gpu(config, 0);
  std::vector<float> params(n, 0.5f), grad(n, 0.0f);
  const auto start = std::chrono::steady_clock::now();
  gpu.Step(1, ParameterDigest(params.data(), n), grad.data());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(took, 0.2 * 0.99);  // the upload, then the downloads (the 3 ms step overlaps them)
  EXPECT_NEAR(gpu.step_seconds(), 0.003 + 0.1, 1e-3);
}

// With bf16 gradients the device rounds each range before its copy, exactly as the client would
// round the fp32 gradient on the host (so the wire carries the same bits either way), and the
// copies move half the bytes: a lower bound of the upload plus half a download.
TEST(EmulatedGpu, ABf16GradientIsTheFp32OneRoundedAndCopiesHalfTheBytes) {
  proto::JobConfig config = Config(proto::ModelConfig::POST_LN);
  const uint64_t n = EmulatedGpu(config, 0).parameter_count();
  config.mutable_cluster()->set_emulated_copy_gb_per_s(static_cast<float>(n * sizeof(float) / 0.1 / 1e9));
  std::vector<float> params(n, 0.5f), fp32(n, 0.0f), scratch(n, 0.0f);
  EmulatedGpu(config, 1).Step(3, ParameterDigest(params.data(), n), fp32.data());
  std::vector<uint16_t> expected(n), bf16(n, 0);
  FloatsToBf16(fp32.data(), n, expected.data());
  EmulatedGpu gpu(config, 1);
  const auto start = std::chrono::steady_clock::now();
  gpu.Step(3, ParameterDigest(params.data(), n), scratch.data(), bf16.data());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(bf16, expected);
  EXPECT_GE(took, 0.15 * 0.99);
}

// `before_writes` runs once a step, after forward and before any range's download is launched
// or handed over; the downloads then write the whole gradient.
TEST(EmulatedGpu, WritesNoGradientBeforeItsGuardReturns) {
  const proto::JobConfig config = Config(proto::ModelConfig::POST_LN);
  EmulatedGpu gpu(config, 0);
  const uint64_t n = gpu.parameter_count();
  constexpr float kUnwritten = 12345.0f;
  std::vector<float> params(n, 0.5f), grad(n, kUnwritten);
  int guarded = 0, handed_over = 0;
  const auto guard = [&] {
    ++guarded;
    EXPECT_EQ(handed_over, 0) << "a range was handed over before the guard";
    // Held a while: a download launched before it returned would have landed by now.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(std::all_of(grad.begin(), grad.end(), [](float g) { return g == kUnwritten; }))
        << "the gradient was written before the guard returned";
  };
  gpu.Step(
      1, ParameterDigest(params.data(), n), grad.data(), nullptr,
      [&](uint64_t, uint64_t, const StepStats&) { ++handed_over; }, nullptr, guard);
  for (int i = 0; i < handed_over; ++i) gpu.copies().WaitOldest();
  EXPECT_EQ(guarded, 1);
  EXPECT_GT(handed_over, 0);
  EXPECT_TRUE(std::none_of(grad.begin(), grad.end(), [](float g) { return g == kUnwritten; }));
}

// A download records the CRC-32C of each whole block it writes of the array it was aimed at
// (RecordBlockCrcs), as a GPU's copy does: every stretch's CRC from the record is the stretch's
// Crc32c, the gradient is the one written without a record, and the record is what is used (a
// byte changed after the copy inside a whole block leaves the stretch's recorded CRC as it was).
// Downloads into another array record nothing.
TEST(EmulatedGpu, DownloadsRecordTheBlockCrcsOfTheArrayTheyWrite) {
  proto::JobConfig config = Config(proto::ModelConfig::POST_LN);
  config.mutable_model()->set_d_model(32);
  config.mutable_model()->set_d_ff(64);
  config.mutable_model()->set_vocab_size(400);
  const uint64_t n = EmulatedGpu(config, 0).parameter_count();
  std::vector<float> params(n, 0.5f), plain(n, 0.0f);
  EmulatedGpu(config, 2).Step(7, ParameterDigest(params.data(), n), plain.data());
  std::vector<uint16_t> plain_bf16(n);
  FloatsToBf16(plain.data(), n, plain_bf16.data());
  std::mt19937_64 random(5);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    EmulatedGpu gpu(config, 2);
    std::vector<float> grad(n, 0.0f);
    std::vector<uint16_t> grad_bf16(n, 0);
    auto* leaving = bf16 ? reinterpret_cast<uint8_t*>(grad_bf16.data()) : reinterpret_cast<uint8_t*>(grad.data());
    const size_t bytes = n * (bf16 ? sizeof(uint16_t) : sizeof(float));
    ASSERT_GT(BlockCrcs::Blocks(bytes), 8u);
    const BlockCrcs* crcs = gpu.RecordBlockCrcs(leaving, bytes);
    gpu.Step(7, ParameterDigest(params.data(), n), grad.data(), bf16 ? grad_bf16.data() : nullptr);
    if (bf16) {
      EXPECT_EQ(grad_bf16, plain_bf16);
    } else {
      EXPECT_EQ(grad, plain);
    }
    // The blocks some download wrote whole have CRCs recorded (a block across two is read again).
    const size_t size = bytes / n;
    std::vector<bool> recorded(BlockCrcs::Blocks(bytes), false);
    for (const auto& [first, last] : gpu.ranges()) {
      const auto [b, e] = BlockCrcs::WholeBlocks(first * size, last * size);
      for (size_t i = b; i < e; ++i) recorded[i] = true;
    }
    ASSERT_GT(std::count(recorded.begin(), recorded.end(), true), 4);
    for (int i = 0; i < 500; ++i) {
      const size_t begin = random() % bytes, end = begin + random() % (bytes - begin + 1);
      const std::optional<uint32_t> crc = crcs->Crc32cOf(leaving + begin, end - begin);
      const auto [b, e] = BlockCrcs::WholeBlocks(begin, end);
      EXPECT_EQ(crc.has_value(), std::find(recorded.begin() + b, recorded.begin() + e, true) != recorded.begin() + e)
          << begin << " " << end;
      if (crc.has_value()) {
        ASSERT_EQ(*crc, Crc32c(0, leaving + begin, end - begin)) << begin << " " << end;
      }
    }
    const size_t block = std::find(recorded.begin() + recorded.size() / 2, recorded.end(), true) - recorded.begin();
    ASSERT_LT(block, recorded.size());
    const uint32_t before = *crcs->Crc32cOf(leaving + block * kCrcBlockBytes, kCrcBlockBytes);
    leaving[block * kCrcBlockBytes + 10] ^= 1;
    EXPECT_EQ(*crcs->Crc32cOf(leaving + block * kCrcBlockBytes, kCrcBlockBytes), before);

    // Aimed at this array, writing another: nothing recorded for this one.
    EmulatedGpu other(config, 2);
    const BlockCrcs* unused = other.RecordBlockCrcs(leaving, bytes);
    std::vector<float> elsewhere(n, 0.0f);
    other.Step(7, ParameterDigest(params.data(), n), elsewhere.data());
    EXPECT_FALSE(unused->Crc32cOf(leaving, bytes).has_value());
  }
}

}  // namespace
}  // namespace psformer
