// The shared embedding's gradient in two parts (cluster.split_embedding): servers with their
// clients on loopback, workers pushing each embedding piece as a DENSE part (reported first, as
// backward finishes the output projection first) and a ROWS part (the rows their batch looked
// up, after the rest). The weights equal a reference that sums in the documented order
// (docs/determinism.md): the DENSE parts in worker order, then the ROWS parts in worker order
// where any names the element, the two added; whatever the server count, and with ROWS
// pushes lost and duplicated on the way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "common/adam.h"
#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "common/lr_schedule.h"
#include "common/transport/forwarding_van.h"
#include "common/transport/shm_van.h"
#include "common/transport/zmq_van.h"
#include "pserver/server/bsp_policy.h"
#include "pserver/server/shard_optimizer.h"
#include "pserver/wire/piece_table.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 20011;
constexpr uint64_t kWidth = 20;                // the embedding's row width (d_model)
constexpr uint64_t kEmbedding = 300 * kWidth;  // its elements: [0, 6000)
const std::vector<uint64_t> kLayers = {kEmbedding, 9000, 15000};

proto::JobConfig SplitConfig(int workers, int servers) {
  proto::JobConfig config = PsConfig(workers, servers, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_piece_elements(1700);  // the embedding in 4 pieces, cut inside rows
  config.mutable_cluster()->set_split_embedding(true);
  return config;
}

// The rows worker w's batch of step t looks up (ascending), and their gradient.
std::vector<int32_t> Rows(int w, int64_t t) {
  std::vector<int32_t> rows;
  for (int32_t r = 0; r < static_cast<int32_t>(kEmbedding / kWidth); ++r) {
    if ((r * 7 + w * 3 + t) % 5 == 0 || r == 0) rows.push_back(r);  // row 0: the pad, in every batch
  }
  return rows;
}
std::vector<float> RowValues(int w, int64_t t, size_t count) {
  std::vector<float> v(count * kWidth);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * std::cos(0.013f * static_cast<float>(i) + 1.7f * w + 0.3f * t);
  return v;
}

// The update of step t computed directly on the whole vector, in the documented order.
class SplitReference {
 public:
  // `rows_one_by_one`: another order, each worker's rows added to the dense sum in turn.
  SplitReference(const proto::JobConfig& config, bool with_rows, bool rows_one_by_one = false)
      : config_(config), with_rows_(with_rows), one_by_one_(rows_one_by_one), params_(kTotal), m_(kTotal), v_(kTotal) {
    for (size_t i = 0; i < kTotal; ++i) params_[i] = InitValue(i);
  }
  void Step(int64_t t) {
    std::vector<float> g = Gradient(0, t, kTotal);
    uint64_t tokens = Tokens(0, t);
    for (int w = 1; w < config_.cluster().workers(); ++w) {
      const std::vector<float> gw = Gradient(w, t, kTotal);
      for (size_t i = 0; i < kTotal; ++i) g[i] += gw[i];
      tokens += Tokens(w, t);
    }
    if (with_rows_) {
      std::map<uint64_t, float> rows;  // element -> the workers' lookups summed in worker order
      for (int w = 0; w < config_.cluster().workers(); ++w) {
        const std::vector<int32_t> ids = Rows(w, t);
        const std::vector<float> values = RowValues(w, t, ids.size());
        for (size_t r = 0; r < ids.size(); ++r) {
          for (uint64_t c = 0; c < kWidth; ++c) {
            const uint64_t i = static_cast<uint64_t>(ids[r]) * kWidth + c;
            if (one_by_one_) {
              g[i] += values[r * kWidth + c];
              continue;
            }
            auto [it, first] = rows.emplace(i, values[r * kWidth + c]);
            if (!first) it->second += values[r * kWidth + c];
          }
        }
      }
      for (const auto& [i, r] : rows) g[i] += r;
    }
    NormalizeGradient(g.size(), tokens, g.data());
    AdamHyper hyper{config_.optimizer().beta1(), config_.optimizer().beta2(), config_.optimizer().epsilon()};
    AdamUpdate(hyper, t, LearningRate(config_, t), g.size(), g.data(), params_.data(), m_.data(), v_.data());
  }
  const std::vector<float>& params() const { return params_; }

 private:
  proto::JobConfig config_;
  bool with_rows_;
  bool one_by_one_;
  std::vector<float> params_, m_, v_;
};

// Loses the first ROWS push it is handed and sends the second twice.
class RowsFaultVan : public ForwardingVan {
 public:
  RowsFaultVan() : ForwardingVan(std::make_unique<ZmqVan>()) {}
  Status Send(RawMessage message) override {
    proto::Header h;
    if (!message.frames.empty() &&
        h.ParseFromArray(message.frames[0].data(), static_cast<int>(message.frames[0].size())) &&
        h.type() == proto::PUSH && h.part() == proto::ROWS) {
      const int k = rows_seen_++;
      if (k == 0) return Status::Ok();                         // lost
      if (k == 1) PSF_RETURN_IF_ERROR(inner_->Send(message));  // and again below
    }
    return inner_->Send(std::move(message));
  }
  int rows_seen() const { return rows_seen_; }

 private:
  int rows_seen_ = 0;
};

// Runs `steps` steps of a split job; each worker reports the embedding's range first, then the
// other layers last to first, then its rows (none when !with_rows). Returns the pulled weights.
// `faulty`: worker 0 sends through a RowsFaultVan (and resends after 100 ms). `named`: each
// worker names its rows before it reports anything (PsClient::NameRows), so its servers update
// the rest of each embedding piece before the rows arrive.
std::vector<float> RunSplit(int workers, int servers, int steps, bool with_rows, bool faulty = false,
                            bool named = false) {
  const proto::JobConfig config = SplitConfig(workers, servers);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kLayers));
  EXPECT_TRUE(pieces->has_split());
  ServerGroup group(config, kTotal, "", false, 2, kLayers);
  std::vector<std::unique_ptr<PsClient>> clients;
  RowsFaultVan* fault_van = nullptr;
  for (int w = 0; w < workers; ++w) {
    if (faulty && w == 0) {
      PsClientOptions o;
      o.pieces = pieces;
      o.job_id = kJobId;
      o.id = 0;
      o.servers = group.endpoints();
      o.parameter_count = kTotal;
      o.frame_bytes = 4096;
      o.timeout_ms = 20000;
      o.retry_ms = 100;
      auto van = std::make_unique<RowsFaultVan>();
      fault_van = van.get();
      auto client = PsClient::Create(std::move(o), std::move(van));
      EXPECT_TRUE(client.ok()) << client.status().ToString();
      clients.push_back(std::move(client).value());
    } else {
      clients.push_back(MakeClient(group, kTotal, w, proto::FLOAT32, 0, proto::WORKER, pieces));
    }
  }
  std::vector<std::vector<float>> params(workers, std::vector<float>(kTotal));
  std::vector<PsClient::Ticket> pulls(workers);
  for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(0, params[w].data());
  std::vector<uint64_t> bounds = kLayers;
  bounds.insert(bounds.begin(), 0);
  bounds.push_back(kTotal);
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> grads(workers), values(workers);
    std::vector<std::vector<int32_t>> rows(workers);
    std::vector<PsClient::Ticket> pushes(workers);
    for (int w = 0; w < workers; ++w) {
      EXPECT_TRUE(clients[w]->Wait(pulls[w]).ok());
      grads[w] = Gradient(w, t, kTotal);
      if (with_rows) rows[w] = Rows(w, t);
      values[w] = RowValues(w, t, rows[w].size());
      pushes[w] = *clients[w]->BeginPush(t, grads[w].data(), Tokens(w, t), 1.0);
      if (named) {
        EXPECT_TRUE(clients[w]->NameRows(pushes[w], rows[w], kWidth).ok());
      }
    }
    for (int w = 0; w < workers; ++w) EXPECT_TRUE(clients[w]->PushReady(pushes[w], 0, kEmbedding).ok());
    for (size_t layer = bounds.size() - 1; layer > 1; --layer) {
      for (int w = 0; w < workers; ++w) {
        EXPECT_TRUE(clients[w]->PushReady(pushes[w], bounds[layer - 1], bounds[layer]).ok());
      }
    }
    for (int w = 0; w < workers; ++w) {
      EXPECT_TRUE(clients[w]->PushRows(pushes[w], rows[w], values[w].data(), kWidth).ok());
      pulls[w] = *clients[w]->Pull(t, params[w].data());
    }
    ExpectEachEndsWell(clients, pushes);
  }
  ExpectEachEndsWell(clients, pulls);
  for (int w = 1; w < workers; ++w) EXPECT_TRUE(BitwiseEqual(params[w], params[0]));
  if (fault_van != nullptr) {
    EXPECT_GT(fault_van->rows_seen(), 2);  // the lost one was sent again
    uint64_t duplicates = 0;
    for (int k = 0; k < servers; ++k) duplicates += group.server(k).stats().duplicates.load();
    EXPECT_GE(duplicates, 1u);  // the doubled one was recognised
  }
  // Every piece applied once a step, a split one with both its parts.
  for (int k = 0; k < servers; ++k) {
    EXPECT_EQ(group.server(k).stats().updates.load(), static_cast<uint64_t>(steps));
  }
  return params[0];
}

std::vector<float> Reference(int workers, int steps, bool with_rows, bool rows_one_by_one = false) {
  SplitReference ref(SplitConfig(workers, 1), with_rows, rows_one_by_one);
  for (int64_t t = 1; t <= steps; ++t) ref.Step(t);
  return ref.params();
}

TEST(SplitEmbedding, TwoPartPushesGiveTheReferenceSumsWeightsForAnyServerCount) {
  const std::vector<float> expected = Reference(3, 3, true);
  for (int servers : {1, 3}) {
    SCOPED_TRACE("servers = " + std::to_string(servers));
    EXPECT_TRUE(BitwiseEqual(RunSplit(3, servers, 3, true), expected));
  }
  // The test can fail: adding each worker's rows to the dense sum as it goes, (D + r0) + r1,
  // is another sum than D + (r0 + r1), and the weights differ.
  EXPECT_FALSE(BitwiseEqual(expected, Reference(3, 3, true, /*rows_one_by_one=*/true)));
}

// Rows no batch looked up get exactly the update of the dense part alone: what a lookup
// gradient of zeros would leave. With no rows at all the job is the unsplit one's.
TEST(SplitEmbedding, RowsNoBatchLookedUpGetTheDensePartsUpdate) {
  EXPECT_TRUE(BitwiseEqual(RunSplit(2, 2, 2, false), Reference(2, 2, false)));
  const std::vector<float> with_rows = Reference(2, 2, true), dense_only = Reference(2, 2, false);
  // Rows 1..4 of step 1-2 are looked up by some worker; a row no worker of any step looked up is
  // the dense-only job's, bit for bit, in the job with rows.
  std::vector<bool> looked_up(kEmbedding / kWidth, false);
  for (int64_t t = 1; t <= 2; ++t) {
    for (int w = 0; w < 2; ++w) {
      for (int32_t r : Rows(w, t)) looked_up[r] = true;
    }
  }
  const std::vector<float> job = RunSplit(2, 2, 2, true);
  EXPECT_TRUE(BitwiseEqual(job, with_rows));
  int untouched = 0;
  for (size_t r = 0; r < looked_up.size(); ++r) {
    if (looked_up[r]) continue;
    ++untouched;
    EXPECT_EQ(std::memcmp(job.data() + r * kWidth, dense_only.data() + r * kWidth, kWidth * sizeof(float)), 0)
        << "row " << r;
  }
  EXPECT_GT(untouched, 10);
}

TEST(SplitEmbedding, ALostAndADuplicatedRowsPushAreHealedExactlyOnce) {
  EXPECT_TRUE(BitwiseEqual(RunSplit(2, 2, 3, true, /*faulty=*/true), Reference(2, 3, true)));
  EXPECT_TRUE(BitwiseEqual(RunSplit(2, 2, 3, true, /*faulty=*/true, /*named=*/true), Reference(2, 3, true)));
}

// Rows named up front change when elements are updated, never how: the same sum, the same bits,
// for any server count; and rows no batch looked up still get the dense part's update.
TEST(SplitEmbedding, RowsNamedUpFrontGiveTheSameWeights) {
  const std::vector<float> expected = Reference(3, 3, true);
  for (int servers : {1, 3}) {
    SCOPED_TRACE("servers = " + std::to_string(servers));
    EXPECT_TRUE(BitwiseEqual(RunSplit(3, servers, 3, true, false, /*named=*/true), expected));
  }
  EXPECT_TRUE(BitwiseEqual(RunSplit(2, 2, 2, false, false, /*named=*/true), Reference(2, 2, false)));
}

// The point of naming: once every worker's DENSE part is in, its server updates and answers
// every element outside the named rows, while the rows themselves are still to come.
TEST(SplitEmbedding, NamedRowsLetServersAnswerTheRestOfAPieceBeforeTheRowsArrive) {
  const int workers = 2;
  const proto::JobConfig config = SplitConfig(workers, 2);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kLayers));
  ServerGroup group(config, kTotal, "", false, 2, kLayers);
  std::vector<std::unique_ptr<PsClient>> clients;
  std::vector<std::vector<float>> params(workers, std::vector<float>(kTotal)), grads(workers), values(workers);
  std::vector<std::vector<int32_t>> rows(workers);
  std::vector<PsClient::Ticket> pushes(workers), pulls(workers);
  for (int w = 0; w < workers; ++w) {
    // Worker 1 makes no pull digest (as a GPU or CPU worker): its split pieces land without the
    // second part's pass over the piece, into the same bits.
    clients.push_back(MakeClient(group, kTotal, w, proto::FLOAT32, 0, proto::WORKER, pieces, /*pull_digest=*/w == 0));
    ASSERT_TRUE(clients[w]->Wait(*clients[w]->Pull(0, params[w].data())).ok());
  }
  const std::vector<float> initial = params[0];
  SplitReference reference(SplitConfig(workers, 1), true);
  reference.Step(1);
  const std::vector<float>& expected = reference.params();
  std::vector<bool> named(kEmbedding / kWidth, false);
  for (int w = 0; w < workers; ++w) {
    grads[w] = Gradient(w, 1, kTotal);
    rows[w] = Rows(w, 1);
    values[w] = RowValues(w, 1, rows[w].size());
    for (int32_t r : rows[w]) named[r] = true;
    pushes[w] = *clients[w]->BeginPush(1, grads[w].data(), Tokens(w, 1), 1.0);
    ASSERT_TRUE(clients[w]->NameRows(pushes[w], rows[w], kWidth).ok());
    ASSERT_TRUE(clients[w]->PushReady(pushes[w], 0, kTotal).ok());
    pulls[w] = *clients[w]->Pull(1, params[w].data());
  }
  // Every part but the embedding pieces' ROWS parts (one per split piece) can be answered now.
  int split = 0;
  for (const Piece& p : pieces->pieces()) split += p.split ? 1 : 0;
  ASSERT_GT(split, 1);
  const auto all_but_rows = [&](int w) {
    const auto [answered, parts] = clients[w]->PartsAnswered(pulls[w]);
    return answered == parts - split;
  };
  for (int i = 0; i < 500 && !(all_but_rows(0) && all_but_rows(1)); ++i) {
    for (int w = 0; w < workers; ++w) ASSERT_TRUE(clients[w]->Progress(10).ok());
  }
  ASSERT_TRUE(all_but_rows(0) && all_but_rows(1));
  int differs = 0;
  for (size_t r = 0; r < named.size(); ++r) {
    const size_t at = r * kWidth, bytes = kWidth * sizeof(float);
    for (int w = 0; w < workers; ++w) {
      // Rows outside the named ones hold their update already; the named ones the old values.
      EXPECT_EQ(std::memcmp(params[w].data() + at, (named[r] ? initial : expected).data() + at, bytes), 0)
          << "worker " << w << " row " << r << (named[r] ? " (named)" : "");
    }
    differs += named[r] && std::memcmp(initial.data() + at, expected.data() + at, bytes) != 0 ? 1 : 0;
  }
  EXPECT_GT(differs, 10) << "the named rows' update changes them: the check above could fail";
  for (int w = 0; w < workers; ++w) {
    ASSERT_TRUE(clients[w]->PushRows(pushes[w], rows[w], values[w].data(), kWidth).ok());
  }
  for (int w = 0; w < workers; ++w) {
    ASSERT_TRUE(clients[w]->Wait(pushes[w]).ok());
    ASSERT_TRUE(clients[w]->Wait(pulls[w]).ok());
    EXPECT_TRUE(BitwiseEqual(params[w], expected)) << "worker " << w;
    // The pull's digest is the whole vector's CRC, however its pieces travelled; none when not asked for.
    EXPECT_EQ(clients[w]->last_pull_digest(), w == 0 ? Crc32c(0, params[w].data(), kTotal * sizeof(float)) : 0u);
  }
}

// The rows a push brings must be among those it named: the client says so before sending, and
// a server refuses a ROWS part outside what its DENSE part named.
TEST(SplitEmbedding, RowsOutsideTheNamedOnesAreRefused) {
  const proto::JobConfig config = SplitConfig(1, 1);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kLayers));
  const std::vector<float> g = Gradient(0, 1, kTotal);
  const std::vector<float> values(3 * kWidth, 0.25f);
  ServerGroup group(config, kTotal, "", false, 2, kLayers);
  auto client = MakeClient(group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, pieces);
  auto push = *client->BeginPush(1, g.data(), Tokens(0, 1), 1.0);
  EXPECT_TRUE(client->NameRows(push, std::vector<int32_t>{3, 2}, kWidth).IsInvalidArgument()) << "out of order";
  ASSERT_TRUE(client->NameRows(push, std::vector<int32_t>{2, 5, 9}, kWidth).ok());
  EXPECT_TRUE(client->NameRows(push, std::vector<int32_t>{2}, kWidth).IsInvalidArgument()) << "twice";
  EXPECT_TRUE(client->PushRows(push, std::vector<int32_t>{2, 6}, values.data(), kWidth).IsInvalidArgument());
  ASSERT_TRUE(client->PushReady(push, 0, kTotal).ok());
  ASSERT_TRUE(client->PushRows(push, std::vector<int32_t>{2, 9}, values.data(), kWidth).ok());
  ASSERT_TRUE(client->Wait(push).ok());
  auto late = *client->BeginPush(2, g.data(), Tokens(0, 2), 1.0);
  ASSERT_TRUE(client->PushReady(late, 0, kEmbedding).ok());
  EXPECT_TRUE(client->NameRows(late, std::vector<int32_t>{1}, kWidth).IsInvalidArgument())
      << "after the DENSE parts left";
}

// The server's own check, below the client's: a ROWS part naming a row its worker's DENSE part did
// not name, or one the piece's first pass has updated already, is inconsistent.
TEST(SplitEmbedding, ServersFindRowsOutsideTheNamedOnesInconsistent) {
  const proto::JobConfig config = SplitConfig(1, 1);
  const uint64_t n = 40;
  BspPolicy policy(1, ShardRange{0, n}, {0}, {1});
  ShardOptimizer optimizer(config, 0, n, 1);
  optimizer.Initialize([](uint64_t, uint64_t e, float* out) { std::fill(out, out + e, 0.5f); });
  const auto message = [&](proto::PushPart part, const std::vector<ElementRun>& runs, uint64_t values) {
    WireMessage m;
    m.header.set_type(proto::PUSH);
    m.header.set_step(1);
    m.header.set_part(part);
    m.header.set_named(part == proto::DENSE);
    m.header.set_dtype(proto::FLOAT32);
    m.header.set_begin(0);
    m.header.set_end(n);
    m.header.set_target_tokens(4);
    m.header.set_runs(static_cast<uint32_t>(runs.size()));
    if (!runs.empty()) m.payload.push_back(Frame::Copy(runs.data(), runs.size() * kRunBytes));
    const std::vector<float> v(values, 0.125f);
    m.payload.push_back(Frame::Copy(v.data(), v.size() * sizeof(float)));
    return m;
  };
  ASSERT_FALSE(policy.Accept(0, message(proto::DENSE, {{8, 4}, {20, 4}}, n), &optimizer) == std::nullopt)
      << "every DENSE part in, naming its rows: the first pass";
  EXPECT_EQ(policy.Inconsistent(0, message(proto::ROWS, {{8, 4}}, 4)), "");
  EXPECT_NE(policy.Inconsistent(0, message(proto::ROWS, {{8, 4}, {12, 4}}, 8)), "");
  EXPECT_NE(policy.Inconsistent(0, message(proto::ROWS, {{0, 4}}, 4)), "");
  EXPECT_FALSE(policy.CheckpointReady(0, ShardProgress{})) << "a first pass makes the step in progress";
  EXPECT_EQ(optimizer.pieces_in_progress(), 1) << "and its moments live (no checkpoint of the step before)";
  const std::optional<AppliedUpdate> done = policy.Accept(0, message(proto::ROWS, {{20, 4}}, 4), &optimizer);
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->whole_step);
  EXPECT_EQ(optimizer.pieces_in_progress(), 0);
}

TEST(SplitEmbedding, AWaitForAPushWhoseRowsWereNeverReportedSaysSo) {
  const proto::JobConfig config = SplitConfig(1, 1);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kLayers));
  const std::vector<float> g = Gradient(0, 1, kTotal);  // outlives the client: its frames may be in flight
  ServerGroup group(config, kTotal, "", false, 2, kLayers);
  auto client = MakeClient(group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, pieces);
  auto push = client->Push(1, g.data(), Tokens(0, 1), 1.0);
  ASSERT_TRUE(push.ok());
  const Status s = client->Wait(*push);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("rows (PushRows)"), std::string::npos) << s.ToString();
  // Rows out of order, or outside the embedding, are refused before anything is sent.
  auto next = client->BeginPush(1, g.data(), Tokens(0, 1), 1.0);
  const std::vector<float> values(2 * kWidth, 0.f);
  EXPECT_TRUE(client->PushRows(*next, std::vector<int32_t>{3, 2}, values.data(), kWidth).IsInvalidArgument());
  EXPECT_TRUE(client->PushRows(*next, std::vector<int32_t>{2, 1000000}, values.data(), kWidth).IsInvalidArgument());
  // Row 300 is the first past the embedding (inside the vector: it would be dropped unsaid).
  EXPECT_TRUE(client->PushRows(*next, std::vector<int32_t>{2, 300}, values.data(), kWidth).IsInvalidArgument());
  EXPECT_TRUE(client->PushRows(*next, std::vector<int32_t>{2, 299}, values.data(), kWidth).ok());
}

// A server of a split job refuses a whole push of an embedding piece, and a DENSE or ROWS push
// of any other piece: a worker configured otherwise than its servers is told so.
TEST(SplitEmbedding, ServersRefuseAPushOfTheWrongPart) {
  proto::JobConfig unsplit = SplitConfig(1, 1);
  unsplit.mutable_cluster()->set_split_embedding(false);
  const auto whole_pieces = std::make_shared<const PieceTable>(JobPieceTable(unsplit, kTotal, kLayers));
  const std::vector<float> g = Gradient(0, 1, kTotal);
  ServerGroup group(SplitConfig(1, 1), kTotal, "", false, 2, kLayers);
  auto client = MakeClient(group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, whole_pieces);
  auto push = client->Push(1, g.data(), Tokens(0, 1), 1.0);
  ASSERT_TRUE(push.ok());
  const Status s = client->Wait(*push);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("split_embedding"), std::string::npos) << s.ToString();
}

// What a split job's worker sends over same-host shared memory, with its gradient in its client's
// push memory (as a GPU worker's data path puts it: PsClient::AllocatePushMemory).
struct OverShm {
  std::vector<float> params;
  uint64_t copied = 0;  // payload frames copied into a slot, over both workers
  uint64_t lent = 0;    // payload frames lent in place
};

// 2 workers, 2 servers, 3 steps of the split job over same-host shared memory, `wire` on the
// wire (bf16: the gradient rounded by the caller, PushBf16, as a GPU rounds it). The rows' values
// lie in push memory too when `rows_in_push_memory`, and are then, with bf16, rounded by the caller
// (PushRowsBf16); else they lie on the heap and the client rounds them (PushRows).
OverShm RunSplitOverShm(proto::DType wire, bool rows_in_push_memory) {
  constexpr int kWorkers = 2, kSteps = 3;
  const bool bf16 = wire == proto::BFLOAT16;
  TempDir dir;
  proto::JobConfig config = SplitConfig(kWorkers, 2);
  if (bf16) config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::BF16);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kLayers));
  ServerGroup group(config, kTotal, "", false, 2, kLayers, dir.path().string());
  std::vector<std::unique_ptr<PsClient>> clients;
  std::vector<ShmVan*> vans;
  std::vector<std::shared_ptr<void>> grad_memory, rows_memory;
  for (int w = 0; w < kWorkers; ++w) {
    // A piece's rows' values (17 rows of 20) go through shared memory, its runs inline.
    ShmVan* van = nullptr;
    clients.push_back(MakeShmClient(group, kTotal, w, /*threshold_bytes=*/512, &van, wire, pieces));
    if (clients[w] == nullptr) return {};
    vans.push_back(van);
    grad_memory.push_back(clients[w]->AllocatePushMemory(kTotal * sizeof(float)));
    rows_memory.push_back(clients[w]->AllocatePushMemory(kEmbedding * sizeof(float)));
  }
  std::vector<float> params(kTotal);
  for (int64_t t = 1; t <= kSteps; ++t) {
    std::vector<PsClient::Ticket> pushes(kWorkers);
    std::vector<std::vector<int32_t>> rows(kWorkers);
    std::vector<std::vector<float>> heap_values(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      EXPECT_TRUE(clients[w]->AwaitLentPushes().ok());
      const std::vector<float> g = Gradient(w, t, kTotal);
      rows[w] = Rows(w, t);
      heap_values[w] = RowValues(w, t, rows[w].size());
      auto* grad = static_cast<float*>(grad_memory[w].get());
      auto* grad_bf16 = static_cast<uint16_t*>(grad_memory[w].get());
      if (bf16) {
        FloatsToBf16(g.data(), g.size(), grad_bf16);
      } else {
        std::copy(g.begin(), g.end(), grad);
      }
      auto begun = bf16 ? clients[w]->BeginPushBf16(t, grad_bf16, Tokens(w, t), 1.0)
                        : clients[w]->BeginPush(t, grad, Tokens(w, t), 1.0);
      EXPECT_TRUE(begun.ok()) << begun.status().ToString();
      pushes[w] = *begun;
      EXPECT_TRUE(clients[w]->PushReady(pushes[w], 0, kTotal).ok());
    }
    for (int w = 0; w < kWorkers; ++w) {
      const std::vector<float>& v = heap_values[w];
      Status rows_sent;
      if (!rows_in_push_memory) {
        rows_sent = clients[w]->PushRows(pushes[w], rows[w], v.data(), kWidth);
      } else if (bf16) {
        auto* to = static_cast<uint16_t*>(rows_memory[w].get());
        FloatsToBf16(v.data(), v.size(), to);
        rows_sent = clients[w]->PushRowsBf16(pushes[w], rows[w], to, kWidth);
      } else {
        auto* to = static_cast<float*>(rows_memory[w].get());
        std::copy(v.begin(), v.end(), to);
        rows_sent = clients[w]->PushRows(pushes[w], rows[w], to, kWidth);
      }
      EXPECT_TRUE(rows_sent.ok()) << rows_sent.ToString();
    }
    for (int w = 0; w < kWorkers; ++w) {
      const Status s = clients[w]->Wait(pushes[w]);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int w = 0; w < kWorkers; ++w) {
      auto pull = clients[w]->Pull(t, params.data());
      EXPECT_TRUE(pull.ok() && clients[w]->Wait(*pull).ok());
    }
  }
  OverShm out;
  out.params = params;
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_TRUE(clients[w]->AwaitLentPushes().ok());
    EXPECT_EQ(vans[w]->frames_on_loan(), 0u);
    out.copied += vans[w]->stats().frames_sent_shm;
    out.lent += vans[w]->stats().frames_lent;
  }
  return out;
}

// A GPU worker copies the lookups' values off its device into push memory, rounded there when
// bf16 travels: then the ROWS parts, like the rest, reach same-host servers lent in place (not a
// frame copied into a slot), and the weights are those of rows pushed from the heap.
TEST(SplitEmbedding, RowsFromPushMemoryAreLentInPlaceAndGiveTheSameWeights) {
  const OverShm heap = RunSplitOverShm(proto::FLOAT32, false), lent = RunSplitOverShm(proto::FLOAT32, true);
  EXPECT_GT(heap.copied, 0u) << "the rows' values from the heap are copied into slots";
  EXPECT_EQ(lent.copied, 0u);
  EXPECT_GT(lent.lent, heap.lent);
  EXPECT_TRUE(BitwiseEqual(heap.params, Reference(2, 3, true)));
  EXPECT_TRUE(BitwiseEqual(lent.params, heap.params));

  // bf16: rounded by the caller (as a device rounds) or by the client, the same bits travel.
  const OverShm client_rounded = RunSplitOverShm(proto::BFLOAT16, false);
  const OverShm caller_rounded = RunSplitOverShm(proto::BFLOAT16, true);
  EXPECT_GT(client_rounded.copied, 0u);
  EXPECT_EQ(caller_rounded.copied, 0u);
  EXPECT_TRUE(BitwiseEqual(caller_rounded.params, client_rounded.params));
  EXPECT_FALSE(BitwiseEqual(caller_rounded.params, heap.params)) << "the rounding is real";
}

TEST(SplitEmbedding, RowsRoundedByTheCallerNeedBf16OnTheWire) {
  const proto::JobConfig config = SplitConfig(1, 1);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kLayers));
  const std::vector<float> g = Gradient(0, 1, kTotal);
  ServerGroup group(config, kTotal, "", false, 2, kLayers);
  auto client = MakeClient(group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, pieces);
  auto push = client->BeginPush(1, g.data(), Tokens(0, 1), 1.0);
  ASSERT_TRUE(push.ok());
  const std::vector<uint16_t> rounded(kWidth, 0);
  const Status s = client->PushRowsBf16(*push, std::vector<int32_t>{2}, rounded.data(), kWidth);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("FLOAT32"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace psformer::testing
