// Parameter servers with their clients on loopback: BSP results bitwise equal to AdamUpdate on
// the whole vector, whatever the arrival order and the number of servers; exactly-once pushes;
// bf16 gradients; async application; the SSP staleness bound.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <tuple>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "pserver/server/shard_optimizer.h"
#include "pserver/wire/piece_table.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 20011;  // prime: shards of unequal size.

// Runs `steps` BSP steps with `workers` clients driven from one thread; in step t the pushes go
// out in order orders[t % orders.size()], each waiting for its ACK, so the servers see exactly
// that arrival order. Returns the parameters pulled after the last step. `pre_rounded`: bf16
// gradients are rounded by the caller (as a GPU worker's device does) and pushed with PushBf16.
std::vector<float> RunBsp(int workers, int servers, int steps, const std::vector<std::vector<int>>& orders,
                          proto::DType dtype = proto::FLOAT32, bool pre_rounded = false) {
  const proto::JobConfig config = PsConfig(workers, servers, proto::ClusterConfig::BSP);
  ServerGroup group(config, kTotal);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < workers; ++w) clients.push_back(MakeClient(group, kTotal, w, dtype));
  std::vector<std::vector<float>> params(workers, std::vector<float>(kTotal));
  for (int w = 0; w < workers; ++w) {
    auto pull = clients[w]->Pull(0, params[w].data());
    EXPECT_TRUE(pull.ok() && clients[w]->Wait(*pull).ok());
  }
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> grads(workers);
    std::vector<std::vector<uint16_t>> rounded(workers);
    for (int w : orders[t % orders.size()]) {
      grads[w] = Gradient(w, t, kTotal);
      rounded[w].resize(kTotal);
      FloatsToBf16(grads[w].data(), kTotal, rounded[w].data());
      auto push = pre_rounded ? clients[w]->PushBf16(t, rounded[w].data(), Tokens(w, t), 1.0)
                              : clients[w]->Push(t, grads[w].data(), Tokens(w, t), 1.0);
      EXPECT_TRUE(push.ok());
      Status s = clients[w]->Wait(*push);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int w = 0; w < workers; ++w) {
      auto pull = clients[w]->Pull(t, params[w].data());
      EXPECT_TRUE(pull.ok());
      Status s = clients[w]->Wait(*pull);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int w = 1; w < workers; ++w) EXPECT_TRUE(BitwiseEqual(params[w], params[0]));
  }
  return params[0];
}

// The same job with overlap: the vector cut into pieces at `cuts` and every `max_piece` elements.
// Each worker pushes its gradient in parts as a backward pass would report layers (the last
// first), the workers' reports interleaved, then pulls the step piece by piece.
std::vector<float> RunBspInPieces(int workers, int servers, int steps, const std::vector<uint64_t>& cuts,
                                  int max_piece) {
  proto::JobConfig config = PsConfig(workers, servers, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_piece_elements(max_piece);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, cuts));
  EXPECT_GT(pieces->pieces().size(), static_cast<size_t>(servers) + 2);  // really cut
  ServerGroup group(config, kTotal, "", false, 2, cuts);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < workers; ++w)
    clients.push_back(MakeClient(group, kTotal, w, proto::FLOAT32, 0, proto::WORKER, pieces));
  std::vector<std::vector<float>> params(workers, std::vector<float>(kTotal));
  std::vector<PsClient::Ticket> pulls(workers);
  for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(0, params[w].data());
  // The layers as backward reports them: the last first.
  std::vector<uint64_t> bounds = cuts;
  bounds.push_back(0);
  bounds.push_back(kTotal);
  std::sort(bounds.begin(), bounds.end());
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> grads(workers);
    std::vector<PsClient::Ticket> pushes(workers);
    for (int w = 0; w < workers; ++w) {
      EXPECT_TRUE(clients[w]->Wait(pulls[w]).ok());
      grads[w] = Gradient(w, t, kTotal);
      pushes[w] = *clients[w]->BeginPush(t, grads[w].data(), Tokens(w, t), 1.0);
    }
    for (size_t layer = bounds.size() - 1; layer > 0; --layer) {
      for (int w = 0; w < workers; ++w) {
        EXPECT_TRUE(clients[w]->PushReady(pushes[w], bounds[layer - 1], bounds[layer]).ok());
      }
    }
    for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(t, params[w].data());
    ExpectEachEndsWell(clients, pushes);
  }
  ExpectEachEndsWell(clients, pulls);
  for (int w = 1; w < workers; ++w) EXPECT_TRUE(BitwiseEqual(params[w], params[0]));
  for (int k = 0; k < servers; ++k) {
    const int shard_pieces = pieces->EndOf(k) - pieces->FirstOf(k);
    EXPECT_EQ(group.server(k).stats().pieces_applied.load(), static_cast<uint64_t>(shard_pieces * steps));
  }
  return params[0];
}

std::vector<float> Reference(int workers, int steps, bool bf16 = false) {
  ReferenceTrainer ref(PsConfig(workers, 1, proto::ClusterConfig::BSP), kTotal, bf16);
  for (int64_t t = 1; t <= steps; ++t) ref.Step(t);
  return ref.params();
}

TEST(PserverBsp, OneWorkerOneServerEqualsDirectAdam) {
  EXPECT_TRUE(BitwiseEqual(RunBsp(1, 1, 3, {{0}}), Reference(1, 3)));
}

TEST(PserverBsp, BitwiseIndependentOfArrivalOrderAndServerCount) {
  const std::vector<float> expected = Reference(3, 4);
  const std::vector<std::vector<int>> orders = {{2, 1, 0}, {0, 1, 2}, {1, 2, 0}, {2, 0, 1}};
  for (int servers : {1, 2, 3}) {
    SCOPED_TRACE("servers = " + std::to_string(servers));
    EXPECT_TRUE(BitwiseEqual(RunBsp(3, servers, 4, orders), expected));
  }
  // The test can fail: summing in arrival order instead would differ (float addition does not
  // associate), as the reference with the sum taken in another order shows.
  std::vector<float> a = Gradient(0, 1, kTotal), b = Gradient(1, 1, kTotal), c = Gradient(2, 1, kTotal);
  size_t differ = 0;
  for (size_t i = 0; i < kTotal; ++i) differ += ((a[i] + b[i]) + c[i]) != ((c[i] + b[i]) + a[i]);
  EXPECT_GT(differ, 0u);
}

// Overlap: per-piece pushes, updates and pulls give bitwise the weights of whole ones, with one
// server or several, whether the layers cut the vector or the piece size does.
TEST(PserverBsp, PiecewisePushesAndPullsGiveTheWeightsOfWholeOnes) {
  const std::vector<float> expected = Reference(3, 3);
  const std::vector<uint64_t> layers = {4000, 4001, 9000, 15000, 19990};
  for (int servers : {1, 3}) {
    SCOPED_TRACE("servers = " + std::to_string(servers));
    EXPECT_TRUE(BitwiseEqual(RunBspInPieces(3, servers, 3, layers, 0), expected));
    EXPECT_TRUE(BitwiseEqual(RunBspInPieces(3, servers, 3, layers, 1500), expected));
  }
}

// A pull of the step being applied is answered piece by piece as each piece is updated, before
// the whole step is; a whole-shard pull of it waits for every piece.
TEST(PserverBsp, APieceIsServedOnceItsUpdateIsIn) {
  proto::JobConfig config = PsConfig(2, 1, proto::ClusterConfig::BSP);
  const std::vector<uint64_t> cuts = {10000};
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, cuts));
  ASSERT_EQ(pieces->pieces().size(), 2u);
  ServerGroup group(config, kTotal, "", false, 2, cuts);
  auto w0 = MakeClient(group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, pieces);
  auto w1 = MakeClient(group, kTotal, 1, proto::FLOAT32, 0, proto::WORKER, pieces);
  std::vector<float> p0(kTotal), p1(kTotal);
  ASSERT_TRUE(w0->Wait(*w0->Pull(0, p0.data())).ok());
  ASSERT_TRUE(w1->Wait(*w1->Pull(0, p1.data())).ok());
  const std::vector<float> g0 = Gradient(0, 1, kTotal), g1 = Gradient(1, 1, kTotal);
  const auto push0 = *w0->BeginPush(1, g0.data(), Tokens(0, 1), 1.0);
  const auto push1 = *w1->BeginPush(1, g1.data(), Tokens(1, 1), 1.0);
  // Both workers' upper piece: that piece of step 1 is applied, the lower one is not.
  ASSERT_TRUE(w0->PushReady(push0, 10000, kTotal).ok());
  ASSERT_TRUE(w1->PushReady(push1, 10000, kTotal).ok());
  for (int i = 0; i < 100 && group.server(0).stats().pieces_applied.load() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(group.server(0).stats().pieces_applied.load(), 1u);
  EXPECT_EQ(group.server(0).stats().applied_step.load(), 0);
  ASSERT_TRUE(w0->PushReady(push0, 0, 10000).ok());
  ASSERT_TRUE(w1->PushReady(push1, 0, 10000).ok());
  ASSERT_TRUE(w0->Wait(push0).ok());
  ASSERT_TRUE(w1->Wait(push1).ok());
  ASSERT_TRUE(w0->Wait(*w0->Pull(1, p0.data())).ok());
  EXPECT_TRUE(BitwiseEqual(p0, Reference(2, 1)));
}

TEST(PserverBsp, Bf16GradientsMatchTheRoundedReference) {
  EXPECT_TRUE(BitwiseEqual(RunBsp(2, 2, 3, {{1, 0}}, proto::BFLOAT16), Reference(2, 3, /*bf16=*/true)));
}

// A gradient rounded where it was computed (a GPU's device) and sent as it is gives the weights
// of one the client rounds; a bf16 gradient for a job of fp32 gradients is refused.
TEST(PserverBsp, Bf16GradientsRoundedBeforeThePushGiveTheSameWeights) {
  EXPECT_TRUE(
      BitwiseEqual(RunBsp(2, 2, 3, {{1, 0}}, proto::BFLOAT16, /*pre_rounded=*/true), Reference(2, 3, /*bf16=*/true)));
  const proto::JobConfig config = PsConfig(1, 1, proto::ClusterConfig::BSP);
  ServerGroup group(config, kTotal);
  auto client = MakeClient(group, kTotal, 0, proto::FLOAT32);
  std::vector<uint16_t> rounded(kTotal, 0);
  auto push = client->PushBf16(1, rounded.data(), 1, 1.0);
  ASSERT_FALSE(push.ok());
  EXPECT_NE(push.status().message().find("gradients travel as FLOAT32"), std::string::npos) << push.status().message();
}

// A gradient computed into PsClient::AllocatePushMemory (as a GPU worker copies it off its
// device) reaches same-host servers lent in place: no copy into a slot, the servers hold it until
// their update has used it (so it is still on loan after Wait while another worker has not
// pushed), AwaitLentPushes gives it back, and the weights are those of pushes from the heap.
TEST(PserverBsp, PushesLentInPlaceFromPushMemoryGiveTheWeightsOfCopiedOnes) {
  constexpr int kWorkers = 2, kSteps = 3;
  TempDir dir;
  const proto::JobConfig config = PsConfig(kWorkers, 2, proto::ClusterConfig::BSP);
  ServerGroup group(config, kTotal, "", false, 2, {}, dir.path().string());
  std::vector<std::unique_ptr<PsClient>> clients;
  std::vector<ShmVan*> vans;
  std::vector<float*> grads;
  std::vector<std::shared_ptr<void>> memory;
  for (int w = 0; w < kWorkers; ++w) {
    ShmVan* van = nullptr;
    clients.push_back(MakeShmClient(group, kTotal, w, /*threshold_bytes=*/1024, &van));  // small frames here
    ASSERT_NE(clients[w], nullptr);
    vans.push_back(van);
    memory.push_back(clients[w]->AllocatePushMemory(kTotal * sizeof(float)));
    grads.push_back(static_cast<float*>(memory[w].get()));
  }
  std::vector<float> params(kTotal);
  for (int64_t t = 1; t <= kSteps; ++t) {
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_TRUE(clients[w]->AwaitLentPushes().ok());
      const std::vector<float> g = Gradient(w, t, kTotal);
      std::copy(g.begin(), g.end(), grads[w]);
      auto push = clients[w]->Push(t, grads[w], Tokens(w, t), 1.0);
      ASSERT_TRUE(push.ok());
      const Status s = clients[w]->Wait(*push);
      ASSERT_TRUE(s.ok()) << s.ToString();
      // Worker 0's step is not summed until worker 1's push is in: its servers still read it.
      if (w == 0) {
        EXPECT_GT(vans[0]->frames_on_loan(), 0u) << "step " << t;
      }
    }
    for (int w = 0; w < kWorkers; ++w) {
      auto pull = clients[w]->Pull(t, params.data());
      ASSERT_TRUE(pull.ok());
      ASSERT_TRUE(clients[w]->Wait(*pull).ok());
    }
  }
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(clients[w]->AwaitLentPushes().ok());
    EXPECT_EQ(vans[w]->frames_on_loan(), 0u);
    EXPECT_GT(vans[w]->stats().frames_lent, 0u);
    EXPECT_EQ(vans[w]->stats().frames_sent_shm, 0u);  // not one gradient byte copied into a slot
  }
  EXPECT_TRUE(BitwiseEqual(params, RunBsp(kWorkers, 2, kSteps, {{0, 1}})));
}

// cluster.param_dtype = BF16: a pull for BFLOAT16 brings every fp32 master rounded to bf16 (half
// the bytes), from every shard; a FLOAT32 pull of the same step still brings the masters exactly.
TEST(PserverBsp, Bf16PullBringsTheMastersRoundedAndFp32PullTheMastersThemselves) {
  const std::vector<float> masters = RunBsp(2, 3, 2, {{0, 1}});
  const proto::JobConfig config = PsConfig(2, 3, proto::ClusterConfig::BSP);
  ServerGroup group(config, kTotal);
  auto client = MakeClient(group, kTotal, 0, proto::FLOAT32);
  auto other = MakeClient(group, kTotal, 1, proto::FLOAT32);
  std::vector<float> exact(kTotal), rounded(kTotal);
  for (auto* c : {client.get(), other.get()}) ASSERT_TRUE(c->Wait(*c->Pull(0, exact.data())).ok());
  for (int64_t t = 1; t <= 2; ++t) {  // the steps RunBsp took, pulling in between as it does
    for (auto* c : {client.get(), other.get()}) {
      const int w = c == client.get() ? 0 : 1;
      const std::vector<float> grad = Gradient(w, t, kTotal);
      ASSERT_TRUE(c->Wait(*c->Push(t, grad.data(), Tokens(w, t), 1.0)).ok());
    }
    for (auto* c : {client.get(), other.get()}) ASSERT_TRUE(c->Wait(*c->Pull(t, exact.data())).ok());
  }
  ASSERT_TRUE(client->Wait(*client->Pull(2, exact.data(), proto::FLOAT32)).ok());
  ASSERT_TRUE(client->Wait(*client->Pull(2, rounded.data(), proto::BFLOAT16)).ok());
  // As they came, for a caller that widens them itself: the same bf16 values, not widened.
  std::vector<uint16_t> as_bf16(kTotal, 0);
  ASSERT_TRUE(client->Wait(*client->PullBf16(2, as_bf16.data())).ok());
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(Bf16ToFloat(as_bf16[i]), rounded[i]) << i;
  EXPECT_TRUE(BitwiseEqual(exact, masters));
  size_t changed = 0;
  for (uint64_t i = 0; i < kTotal; ++i) {
    ASSERT_EQ(rounded[i], Bf16ToFloat(FloatToBf16(masters[i]))) << "element " << i;
    changed += rounded[i] != masters[i];
  }
  EXPECT_GT(changed, kTotal / 2);  // the rounding is real: most fp32 values are not bf16 values
}

// One rounding per update serves every bf16 pull of it; an update makes a new one from the new
// values, while a reply still sending the old one keeps it alive.
TEST(ShardOptimizer, Bf16SnapshotIsRoundedOncePerUpdate) {
  const proto::JobConfig config = PsConfig(1, 1, proto::ClusterConfig::BSP);
  ShardOptimizer optimizer(config, 0, 1000, 1, {0, 300});
  optimizer.Initialize([](uint64_t begin, uint64_t end, float* out) {
    for (uint64_t i = begin; i < end; ++i) out[i - begin] = 0.001f * static_cast<float>(i) + 0.1234567f;
  });
  const auto view = [](const SnapshotSlice& s) { return static_cast<const uint16_t*>(s.data); };
  const SnapshotSlice first = optimizer.Slice(ShardOptimizer::Version::kCurrent, true, 0, 1000);
  EXPECT_EQ(view(optimizer.Slice(ShardOptimizer::Version::kCurrent, true, 0, 1000)),
            view(first));  // the same bytes, not a second rounding
  EXPECT_EQ(view(optimizer.Slice(ShardOptimizer::Version::kCurrent, true, 300, 1000)),
            view(first) + 300);  // a piece of them
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(view(first)[i], FloatToBf16(optimizer.params()[i]));
  EXPECT_EQ(first.crc32c, Crc32c(0, first.data, first.bytes));
  EXPECT_EQ(optimizer.Slice(ShardOptimizer::Version::kCurrent, true, 300, 1000).crc32c,
            Crc32c(0, view(first) + 300, 700 * 2));
  const std::vector<uint16_t> before(view(first), view(first) + 1000);
  const std::vector<float> grad = Gradient(0, 1, 1000);
  optimizer.Apply(1, grad.data());
  const SnapshotSlice second = optimizer.Slice(ShardOptimizer::Version::kCurrent, true, 0, 1000);
  EXPECT_NE(view(second), view(first));
  EXPECT_EQ(std::vector<uint16_t>(view(first), view(first) + 1000), before);  // still what it was for its holder
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(view(second)[i], FloatToBf16(optimizer.params()[i]));
  const SnapshotSlice exact = optimizer.Slice(ShardOptimizer::Version::kCurrent, false, 0, 1000);
  EXPECT_EQ(exact.crc32c, Crc32c(0, optimizer.params(), 1000 * sizeof(float)));
}

// The update pass sums the workers' pushes as it reads them from their frames, in worker order:
// bitwise the update of the sum taken first, for 1 to 3 workers, also when the frames split the
// pass's blocks and start at addresses not aligned for floats (as network frames may), and when
// the pass starts from a sum already in memory (Apply's case) and adds pushes to it.
TEST(ShardOptimizer, SummingThePushesInTheUpdateEqualsUpdatingTheSum) {
  const proto::JobConfig config = PsConfig(3, 1, proto::ClusterConfig::BSP);
  const uint64_t n = 20011;  // two pieces, neither a multiple of the pass's block
  const auto init = [](uint64_t begin, uint64_t end, float* out) {
    for (uint64_t i = begin; i < end; ++i) out[i - begin] = InitValue(i);
  };
  const std::vector<std::vector<float>> pushes = {Gradient(0, 1, n), Gradient(1, 1, n), Gradient(2, 1, n)};
  const std::vector<float> base = Gradient(9, 1, n);
  for (const size_t misalign : {0, 1}) {
    // Each push's bytes at an offset of `misalign` in a buffer, read in frames of 4000 bytes.
    std::vector<std::vector<uint8_t>> bytes;
    for (const auto& g : pushes) {
      bytes.emplace_back(n * sizeof(float) + 1);
      std::memcpy(bytes.back().data() + misalign, g.data(), n * sizeof(float));
    }
    for (const size_t workers : {1, 2, 3}) {
      for (const bool from_sum : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "misalign " << misalign << " workers " << workers << " from sum " << from_sum);
        ShardOptimizer direct(config, 0, n, 2, {0, 12345}), fused(config, 0, n, 2, {0, 12345});
        direct.Initialize(init);
        fused.Initialize(init);
        std::vector<float> sum(n);
        for (uint64_t i = 0; i < n; ++i) {
          float s = from_sum ? base[i] + pushes[0][i] : pushes[0][i];
          for (size_t w = 1; w < workers; ++w) s += pushes[w][i];
          sum[i] = s;
        }
        direct.Apply(1, sum.data(), 37);
        for (const auto& [piece, begin, end] : {std::tuple<int, uint64_t, uint64_t>{1, 12345, n}, {0, 0, 12345}}) {
          std::vector<WireMessage> messages(workers);
          PieceGradient g;
          if (from_sum) g.sum = base.data() + begin;
          for (size_t w = 0; w < workers; ++w) {
            messages[w].header.set_dtype(proto::FLOAT32);
            messages[w].header.set_begin(begin);
            messages[w].header.set_end(end);
            AppendViewFrames(bytes[w].data() + misalign + begin * sizeof(float), (end - begin) * sizeof(float), 4000,
                             sizeof(float), nullptr, &messages[w].payload);
            g.parts.push_back(&messages[w]);
          }
          fused.ApplyPiece(1, piece, g, 37);
        }
        fused.FinishStep();
        EXPECT_EQ(0, std::memcmp(direct.params(), fused.params(), n * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(direct.m(), fused.m(), n * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(direct.v(), fused.v(), n * sizeof(float)));
        const SnapshotSlice d = direct.Slice(ShardOptimizer::Version::kCurrent, false, 0, n);
        const SnapshotSlice f = fused.Slice(ShardOptimizer::Version::kCurrent, false, 0, n);
        EXPECT_EQ(d.crc32c, f.crc32c);
        EXPECT_EQ(0, std::memcmp(d.data, f.data, d.bytes));
      }
    }
  }
}

TEST(PserverBsp, ReplayedPushIsAcknowledgedAsDuplicateAndAppliedOnce) {
  const proto::JobConfig config = PsConfig(2, 2, proto::ClusterConfig::BSP);
  ServerGroup group(config, kTotal);
  auto w0 = MakeClient(group, kTotal, 0), w1 = MakeClient(group, kTotal, 1);
  const auto g0 = Gradient(0, 1, kTotal), g1 = Gradient(1, 1, kTotal);
  // Worker 0 pushes twice before the step completes (buffered duplicate) ...
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(w0->Wait(*w0->Push(1, g0.data(), Tokens(0, 1), 0)).ok());
  ASSERT_TRUE(w1->Wait(*w1->Push(1, g1.data(), Tokens(1, 1), 0)).ok());
  // ... and again after it was applied.
  ASSERT_TRUE(w0->Wait(*w0->Push(1, g0.data(), Tokens(0, 1), 0)).ok());
  EXPECT_EQ(w0->duplicate_acks(), 2u * 2u);  // two replays, each acknowledged by both shards.
  EXPECT_EQ(group.server(0).stats().duplicates.load(), 2u);
  EXPECT_EQ(group.server(1).stats().updates.load(), 1u);
  std::vector<float> params(kTotal);
  ASSERT_TRUE(w1->Wait(*w1->Pull(1, params.data())).ok());
  EXPECT_TRUE(BitwiseEqual(params, Reference(2, 1)));
}

TEST(PserverAsync, AppliesEachPushOnArrivalNormalisedByItsOwnTokens) {
  const proto::JobConfig config = PsConfig(2, 2, proto::ClusterConfig::ASYNC);
  ServerGroup group(config, kTotal);
  auto w0 = MakeClient(group, kTotal, 0), w1 = MakeClient(group, kTotal, 1);
  const auto g = Gradient(1, 1, kTotal), h = Gradient(0, 1, kTotal);
  ASSERT_TRUE(w1->Wait(*w1->Push(1, g.data(), 8, 0)).ok());
  std::vector<float> params(kTotal);
  ASSERT_TRUE(w0->Wait(*w0->Pull(0, params.data())).ok());  // no waiting for worker 0's push.
  // Reference: one Adam update with g / 8, then one (the second, bias-corrected as such) with h / 5.
  std::vector<float> p(kTotal), m(kTotal), v(kTotal);
  for (size_t i = 0; i < kTotal; ++i) p[i] = InitValue(i);
  AdamHyper hyper{config.optimizer().beta1(), config.optimizer().beta2(), config.optimizer().epsilon()};
  std::vector<float> gn = g;
  NormalizeGradient(kTotal, 8, gn.data());
  AdamUpdate(hyper, 1, LearningRate(config, 1), kTotal, gn.data(), p.data(), m.data(), v.data());
  EXPECT_TRUE(BitwiseEqual(params, p));
  ASSERT_TRUE(w0->Wait(*w0->Push(1, h.data(), 5, 0)).ok());
  ASSERT_TRUE(w0->Wait(*w0->Pull(1, params.data())).ok());
  std::vector<float> hn = h;
  NormalizeGradient(kTotal, 5, hn.data());
  AdamUpdate(hyper, 2, LearningRate(config, 1), kTotal, hn.data(), p.data(), m.data(), v.data());
  EXPECT_TRUE(BitwiseEqual(params, p));
  EXPECT_EQ(group.server(0).stats().updates.load(), 2u);
}

// Workers on their own threads, worker 0 slow. Each marks a step done before pushing it; when a
// worker is allowed to begin step t, every worker must have finished step t-1-s. Returns the
// largest lead (t - 1 - slowest finished step) any worker saw when it began a step.
int64_t LargestLead(proto::ClusterConfig::Consistency mode, int staleness) {
  constexpr int kWorkers = 3;
  constexpr int kSteps = 8;
  constexpr uint64_t kSmall = 999;
  proto::JobConfig config = PsConfig(kWorkers, 2, mode);
  config.mutable_cluster()->set_staleness(staleness);
  ServerGroup group(config, kSmall);
  std::atomic<int64_t> done[kWorkers] = {};
  std::atomic<int64_t> largest{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      auto client = MakeClient(group, kSmall, w);
      std::vector<float> params(kSmall);
      for (int64_t t = 1; t <= kSteps; ++t) {
        auto pull = client->Pull(t - 1, params.data());
        ASSERT_TRUE(pull.ok() && client->Wait(*pull).ok());
        int64_t slowest = INT64_MAX;
        for (auto& d : done) slowest = std::min(slowest, d.load());
        int64_t lead = t - 1 - slowest;
        int64_t seen = largest.load();
        while (lead > seen && !largest.compare_exchange_weak(seen, lead)) {
        }
        if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
        const auto g = Gradient(w, t, kSmall);
        done[w].store(t);
        auto push = client->Push(t, g.data(), 4, 0);
        ASSERT_TRUE(push.ok() && client->Wait(*push).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  return largest.load();
}

TEST(PserverSsp, NoWorkerRunsMoreThanStalenessStepsAhead) {
  EXPECT_LE(LargestLead(proto::ClusterConfig::SSP, 2), 2);
  EXPECT_LE(LargestLead(proto::ClusterConfig::SSP, 0), 0);
  // Without the bound the fast workers do run ahead: the measurement can see a violation.
  EXPECT_GT(LargestLead(proto::ClusterConfig::ASYNC, 2), 2);
}

}  // namespace
}  // namespace psformer::testing
