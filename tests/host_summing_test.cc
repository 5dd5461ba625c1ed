// Host summing (pserver/aggregator/host_aggregator.h): each host group's aggregator sums its
// workers' pushes in worker order and the servers add the groups' sums in group order. Checked
// against an independent reference of that order, bitwise; a grouping of one worker each gives
// the flat path's bits; each aggregator sends one model's worth a step; an aggregator restarted
// in the middle of a step loses nothing; what does not belong is refused. A job that pushes the
// embedding in two parts (cluster.split_embedding) has each group send a DENSE and a ROWS sum of
// each embedding piece: checked sum by sum against the worker order and an fp64 sum, and, with
// the servers' update, against an independent reference, with parts lost, doubled and restarted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "common/host_groups.h"
#include "pserver/aggregator/host_aggregator.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/piece_table.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr uint64_t kTotal = 20011;  // prime: shards of unequal size
const std::vector<uint64_t> kCuts = {3000, 9000, 15000};

proto::JobConfig GroupedConfig(const std::vector<int>& groups, int servers) {
  int workers = 0;
  for (int g : groups) workers += g;
  proto::JobConfig config = PsConfig(workers, servers, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_piece_elements(4000);
  config.mutable_cluster()->set_retry_ms(200);
  for (int g : groups) config.mutable_cluster()->add_host_groups(g);
  return config;
}

// The servers' update with the grouping's sum order, on the whole vector (ReferenceTrainer
// follows cluster.host_groups).
std::vector<float> GroupedReference(const proto::JobConfig& config, int steps) {
  ReferenceTrainer ref(config, kTotal);
  for (int64_t t = 1; t <= steps; ++t) ref.Step(t);
  return ref.params();
}

// Wraps the Van of worker or aggregator `index` (a test's faults and taps); null: none.
using VanWrapper = std::function<std::unique_ptr<Van>(int index, std::unique_ptr<Van> van)>;

// One aggregator per group, each Run on its own thread, reachable at ipc:// paths in `dir`.
class AggregatorGroup {
 public:
  AggregatorGroup(const proto::JobConfig& config, const ServerGroup& servers, const std::string& dir,
                  const std::vector<uint64_t>& cuts = kCuts, VanWrapper wrap = nullptr)
      : wrap_(std::move(wrap)) {
    for (int g = 0; g < HostGroups::Of(config).count(); ++g) {
      HostAggregatorOptions o;
      o.config = config;
      o.group = g;
      o.parameter_count = kTotal;
      o.layer_starts = cuts;
      o.job_id = kJobId;
      o.servers = servers.endpoints();
      o.endpoint = "ipc://" + dir + "/aggregator-" + std::to_string(g) + ".sock";
      o.threads = 2;
      options_.push_back(o);
      aggregators_.emplace_back();
      threads_.emplace_back();
      Start(g, 0);
    }
  }
  ~AggregatorGroup() {
    for (size_t g = 0; g < aggregators_.size(); ++g) Kill(static_cast<int>(g));
  }
  // Ends aggregator `g` at once, with whatever it held (as SIGKILL would).
  void Kill(int g) {
    if (!aggregators_[g]) return;
    aggregators_[g]->Stop();
    threads_[g].join();
    aggregators_[g].reset();
  }
  void Start(int g, uint32_t incarnation) {
    HostAggregatorOptions o = options_[g];
    o.incarnation = incarnation;
    std::unique_ptr<Van> van = std::make_unique<ZmqVan>();
    if (wrap_) van = wrap_(g, std::move(van));
    auto made = HostAggregator::Create(std::move(o), std::move(van));
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    aggregators_[g] = std::move(made).value();
    threads_[g] = std::thread([a = aggregators_[g].get()] { EXPECT_TRUE(a->Run().ok()); });
  }
  std::string endpoint(int g) const { return options_[g].endpoint; }
  const HostAggregator& aggregator(int g) const { return *aggregators_[g]; }

 private:
  VanWrapper wrap_;
  std::vector<HostAggregatorOptions> options_;
  std::vector<std::unique_ptr<HostAggregator>> aggregators_;
  std::vector<std::thread> threads_;
};

struct GroupedRun {
  std::vector<float> params;
  std::vector<uint64_t> bytes_up;          // per aggregator, over the run
  std::vector<uint64_t> pulls_sent;        // per aggregator
  std::vector<uint64_t> duplicate_shares;  // per aggregator
  std::vector<uint64_t> resends;           // per aggregator
  uint64_t server_duplicates = 0;          // pushes the servers answered as duplicates
};

// The layout of the jobs that push the embedding in two parts (cluster.split_embedding): the
// embedding [0, kEmbed), kLookupRows rows of kWidth (its pieces cut some rows), then three layers.
constexpr uint64_t kWidth = 64, kLookupRows = 101, kEmbed = kWidth * kLookupRows;
const std::vector<uint64_t> kSplitCuts = {0, kEmbed, 12000, 16000};

// The rows worker w's lookups touch at step t (about a third of the embedding's: some shared with
// other workers, some next to each other, some touched by none), and their gradient (rows x kWidth).
struct Lookups {
  std::vector<int32_t> rows;
  std::vector<float> values;
};
Lookups LookupsOf(int w, int64_t t) {
  std::mt19937 rng(static_cast<uint32_t>(7919 * t + 31 * w + 5));
  Lookups l;
  for (int32_t r = 0; r < static_cast<int32_t>(kLookupRows); ++r) {
    if (rng() % 3 == 0) l.rows.push_back(r);
  }
  l.values = Gradient(w + 100, t, l.rows.size() * kWidth);
  return l;
}

struct RunOptions {
  // With restart_at > 0, aggregator 0 is killed when half of that step's reports are in, and
  // started again (the next incarnation) on the same endpoint.
  int restart_at = 0;
  // With restart_rows_at > 0, aggregator 0 is killed and started again once worker 0 alone has
  // pushed that step's rows (it holds one ROWS share of each embedding piece).
  int restart_rows_at = 0;
  std::vector<uint64_t> cuts = kCuts;  // the pieces' layer starts
  bool lookups = false;                // the job splits the embedding: PushRows(LookupsOf) too
  bool named = false;                  // ...and names those rows first (NameRows)
  VanWrapper worker_van, aggregator_van;
};

// `steps` BSP steps of the job (grouped, or flat without host groups), every worker pushing in
// layer-sized reports as backward would, then its lookups' rows, then pulling.
GroupedRun RunJob(const proto::JobConfig& config, int steps, const RunOptions& options = {}) {
  TempDir dir;
  const int workers = config.cluster().workers();
  const HostGroups groups = HostGroups::Of(config);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, options.cuts));
  ServerGroup servers(config, kTotal, "", false, 2, options.cuts);
  AggregatorGroup aggregators(config, servers, dir.path().string(), options.cuts, options.aggregator_van);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < workers; ++w) {
    PsClientOptions o;
    o.pieces = pieces;
    o.job_id = kJobId;
    o.id = static_cast<uint32_t>(w);
    o.servers = servers.endpoints();
    if (groups.summing()) o.aggregator = aggregators.endpoint(groups.GroupOf(w));
    o.parameter_count = kTotal;
    o.frame_bytes = 4096;
    o.timeout_ms = 20000;
    o.retry_ms = 200;
    if (config.cluster().gradient_dtype() == proto::ClusterConfig::BF16) o.gradient_dtype = proto::BFLOAT16;
    std::unique_ptr<Van> van = options.worker_van ? options.worker_van(w, std::make_unique<ZmqVan>()) : nullptr;
    auto client = PsClient::Create(std::move(o), std::move(van));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (!client.ok()) return {};
    clients.push_back(std::move(client).value());
  }
  std::vector<std::vector<float>> params(workers, std::vector<float>(kTotal));
  std::vector<PsClient::Ticket> pulls(workers);
  for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(0, params[w].data());
  std::vector<uint64_t> bounds = options.cuts;
  bounds.insert(bounds.begin(), 0);
  bounds.push_back(kTotal);
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  uint32_t incarnation = 0;  // aggregator 0's
  const auto restart = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    aggregators.Kill(0);
    aggregators.Start(0, ++incarnation);
  };
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> grads(workers);
    std::vector<Lookups> lookups(workers);
    std::vector<PsClient::Ticket> pushes(workers);
    for (int w = 0; w < workers; ++w) {
      Status s = clients[w]->Wait(pulls[w]);
      EXPECT_TRUE(s.ok()) << s.ToString();
      grads[w] = Gradient(w, t, kTotal);
      pushes[w] = *clients[w]->BeginPush(t, grads[w].data(), Tokens(w, t), 1.0);
      if (options.lookups && options.named) {
        EXPECT_TRUE(clients[w]->NameRows(pushes[w], LookupsOf(w, t).rows, kWidth).ok());
      }
    }
    for (size_t layer = bounds.size() - 1; layer > 0; --layer) {
      // Some sums of this step are on their way, some shares held: all of it is lost.
      if (t == options.restart_at && layer == bounds.size() / 2) restart();
      for (int w = 0; w < workers; ++w) {
        EXPECT_TRUE(clients[w]->PushReady(pushes[w], bounds[layer - 1], bounds[layer]).ok());
      }
    }
    for (int w = 0; w < workers && options.lookups; ++w) {
      if (t == options.restart_rows_at && w == 1) restart();
      lookups[w] = LookupsOf(w, t);
      const Status s = clients[w]->PushRows(pushes[w], lookups[w].rows, lookups[w].values.data(), kWidth);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(t, params[w].data());
    for (int w = 0; w < workers; ++w) {
      Status s = clients[w]->Wait(pushes[w]);
      EXPECT_TRUE(s.ok()) << "worker " << w << ", step " << t << ": " << s.ToString();
    }
  }
  ExpectEachEndsWell(clients, pulls);
  for (int w = 1; w < workers; ++w) EXPECT_TRUE(BitwiseEqual(params[w], params[0]));
  GroupedRun run;
  run.params = params[0];
  for (int g = 0; g < groups.count(); ++g) {
    const HostAggregatorStats& stats = aggregators.aggregator(g).stats();
    run.bytes_up.push_back(stats.bytes_up.load());
    run.pulls_sent.push_back(stats.pulls_sent.load());
    run.duplicate_shares.push_back(stats.duplicate_shares.load());
    run.resends.push_back(stats.resends.load());
  }
  for (int k = 0; k < config.cluster().servers(); ++k) run.server_duplicates += servers.server(k).stats().duplicates;
  return run;
}

GroupedRun RunGrouped(const proto::JobConfig& config, int steps, int restart_at = 0) {
  RunOptions options;
  options.restart_at = restart_at;
  return RunJob(config, steps, options);
}

TEST(HostSumming, ServersAddTheGroupsSumsInGroupOrderBitwise) {
  const proto::JobConfig config = GroupedConfig({2, 2}, 2);
  const GroupedRun run = RunGrouped(config, 4);
  const std::vector<float> expected = GroupedReference(config, 4);
  EXPECT_TRUE(BitwiseEqual(run.params, expected));
  // The test can fail: the flat path's order (((g0 + g1) + g2) + g3) gives other bits.
  ReferenceTrainer flat(PsConfig(4, 1, proto::ClusterConfig::BSP), kTotal);
  for (int64_t t = 1; t <= 4; ++t) flat.Step(t);
  EXPECT_FALSE(BitwiseEqual(flat.params(), expected));
}

TEST(HostSumming, GroupsOfOneWorkerGiveTheFlatPathsBits) {
  const GroupedRun run = RunGrouped(GroupedConfig({1, 1, 1}, 3), 3);
  ReferenceTrainer flat(PsConfig(3, 1, proto::ClusterConfig::BSP), kTotal);
  for (int64_t t = 1; t <= 3; ++t) flat.Step(t);
  EXPECT_TRUE(BitwiseEqual(run.params, flat.params()));
}

TEST(HostSumming, EachGroupSendsOneModelAStepAndPullsEachPieceOnce) {
  const proto::JobConfig config = GroupedConfig({3, 2}, 2);
  const int steps = 3;
  const GroupedRun run = RunGrouped(config, steps);
  const size_t pieces = JobPieceTable(config, kTotal, kCuts).pieces().size();
  for (int g = 0; g < 2; ++g) {
    SCOPED_TRACE("group " + std::to_string(g));
    // Resends would add to it; on loopback there are none.
    EXPECT_EQ(run.bytes_up[g], steps * kTotal * sizeof(float));
    EXPECT_EQ(run.pulls_sent[g], (steps + 1) * pieces);  // the initial pull, then one per step
  }
  EXPECT_TRUE(BitwiseEqual(run.params, GroupedReference(config, steps)));
}

TEST(HostSumming, AnAggregatorKilledMidStepLosesNothing) {
  const proto::JobConfig config = GroupedConfig({2, 2}, 2);
  const GroupedRun run = RunGrouped(config, 4, /*restart_at=*/2);
  EXPECT_TRUE(BitwiseEqual(run.params, GroupedReference(config, 4)));
}

TEST(HostSumming, WhatDoesNotBelongIsRefused) {
  TempDir dir;
  const proto::JobConfig config = GroupedConfig({2, 2}, 1);
  ServerGroup servers(config, kTotal, "", false, 2, kCuts);
  AggregatorGroup aggregators(config, servers, dir.path().string());
  // A worker's own push to a server: with host summing only the groups' sums are taken.
  auto direct = MakeClient(servers, kTotal, 0, proto::FLOAT32, 0, proto::WORKER,
                           std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kCuts)));
  std::vector<float> grad = Gradient(0, 1, kTotal);
  auto push = direct->Push(1, grad.data(), Tokens(0, 1), 1.0);
  ASSERT_TRUE(push.ok());
  const Status refused = direct->Wait(*push);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("host groups"), std::string::npos) << refused.message();
  EXPECT_GT(servers.server(0).stats().rejected.Get(RejectReason::kUnknownSender), 0u);
  // Worker 2 (group 1) at group 0's aggregator.
  PsClientOptions o;
  o.pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kCuts));
  o.job_id = kJobId;
  o.id = 2;
  o.servers = servers.endpoints();
  o.aggregator = aggregators.endpoint(0);
  o.parameter_count = kTotal;
  o.timeout_ms = 5000;
  auto stranger = PsClient::Create(std::move(o));
  ASSERT_TRUE(stranger.ok());
  auto pull = (*stranger)->Pull(0, grad.data());
  ASSERT_TRUE(pull.ok());
  const Status not_mine = (*stranger)->Wait(*pull);
  EXPECT_FALSE(not_mine.ok());
  EXPECT_NE(not_mine.message().find("not a worker of host group 0"), std::string::npos) << not_mine.message();
  EXPECT_GT(aggregators.aggregator(0).stats().rejected.Get(RejectReason::kUnknownSender), 0u);
}

TEST(HostSumming, ASumFromAnUnknownGroupOrAFutureStepIsRefusedAndCounted) {
  const proto::JobConfig config = GroupedConfig({2, 2}, 1);
  ServerGroup servers(config, kTotal);
  std::vector<float> sum = Gradient(0, 1, kTotal);
  // Group 2 of a job with two groups.
  auto stranger = MakeClient(servers, kTotal, 2, proto::FLOAT32, 0, proto::AGGREGATOR);
  auto push = stranger->Push(1, sum.data(), 10, 1.0);
  ASSERT_TRUE(push.ok());
  Status s = stranger->Wait(*push);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("AGGREGATOR 2 may not send PUSH"), std::string::npos) << s.message();
  EXPECT_EQ(servers.server(0).stats().rejected.Get(RejectReason::kUnknownSender), 1u);
  // Group 1's sum of step 3 while the job is at step 0.
  auto ahead = MakeClient(servers, kTotal, 1, proto::FLOAT32, 0, proto::AGGREGATOR);
  push = ahead->Push(3, sum.data(), 10, 1.0);
  ASSERT_TRUE(push.ok());
  s = ahead->Wait(*push);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("push of step 3 from host group 1 whose last push was step 0"), std::string::npos)
      << s.message();
  EXPECT_EQ(servers.server(0).stats().rejected.Get(RejectReason::kFutureStep), 1u);
  EXPECT_EQ(servers.server(0).stats().updates.load(), 0u);
}

TEST(HostSumming, AnAggregatorNeedsAGroupingThatSums) {
  proto::JobConfig config = GroupedConfig({2, 2}, 1);
  HostAggregatorOptions o;
  o.config = config;
  o.group = 2;
  o.parameter_count = kTotal;
  o.servers = {"tcp://127.0.0.1:1"};
  auto outside = HostAggregator::Create(o, std::make_unique<ZmqVan>());
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("host group 2 is outside 0..1"), std::string::npos);
  o.config.mutable_cluster()->clear_host_groups();
  o.group = 0;
  auto flat = HostAggregator::Create(o, std::make_unique<ZmqVan>());
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("needs host summing"), std::string::npos);
}

// ---- The embedding in two parts (cluster.split_embedding): each group's aggregator sums the
// DENSE parts and the ROWS parts of a piece apart and sends each sum up on its own.

proto::JobConfig SplitConfig(const std::vector<int>& groups, int servers, bool bf16 = false) {
  proto::JobConfig config = GroupedConfig(groups, servers);
  if (groups.size() < 2) config.mutable_cluster()->clear_host_groups();  // the flat path
  config.mutable_cluster()->set_split_embedding(true);
  if (bf16) config.mutable_cluster()->set_gradient_dtype(proto::ClusterConfig::BF16);
  return config;
}

RunOptions SplitRun() {
  RunOptions options;
  options.cuts = kSplitCuts;
  options.lookups = true;
  return options;
}

float Bf16(float x) { return Bf16ToFloat(FloatToBf16(x)); }

// What worker w of a split job pushes at step t, by model element: its dense gradient (kTotal),
// and its lookups' (kEmbed) where `named` (a row it looked up holds the element); rounded to bf16
// when `bf16`, as its client sends them.
struct Pushed {
  std::vector<float> dense, rows;
  std::vector<uint8_t> named;
};
Pushed PushedBy(int w, int64_t t, bool bf16) {
  Pushed p;
  p.dense = Gradient(w, t, kTotal);
  p.rows.assign(kEmbed, 0.0f);
  p.named.assign(kEmbed, 0);
  const Lookups l = LookupsOf(w, t);
  for (size_t i = 0; i < l.rows.size(); ++i) {
    for (uint64_t j = 0; j < kWidth; ++j) {
      const uint64_t e = static_cast<uint64_t>(l.rows[i]) * kWidth + j;
      p.rows[e] = l.values[i * kWidth + j];
      p.named[e] = 1;
    }
  }
  if (bf16) {
    for (float& x : p.dense) x = Bf16(x);
    for (float& x : p.rows) x = Bf16(x);
  }
  return p;
}

// sum += p, in fp32: the dense gradients elementwise (an empty sum starts as p itself, not 0 + p),
// the lookups' where p names the element (the first value named itself, then + the next ...).
void AddPushed(Pushed* sum, const Pushed& p) {
  if (sum->dense.empty()) {
    *sum = p;
    return;
  }
  for (size_t i = 0; i < p.dense.size(); ++i) sum->dense[i] += p.dense[i];
  for (size_t e = 0; e < p.rows.size(); ++e) {
    if (p.named[e] == 0) continue;
    sum->rows[e] = sum->named[e] != 0 ? sum->rows[e] + p.rows[e] : p.rows[e];
    sum->named[e] = 1;
  }
}

// The split job's update on the whole vector in the grouping's order, independent of servers,
// aggregators and sockets: each group's pushes added (AddPushed) in worker order, rounded to bf16
// where the job pushes bf16 (its aggregator sends them so); the groups' sums added in group
// order; the lookups' sum added to the dense one where some worker names the element; normalised
// by the step's tokens; Adam. Without groups, one group of every worker, its sum not rounded.
class SplitReference {
 public:
  explicit SplitReference(const proto::JobConfig& config) : config_(config), params_(kTotal), m_(kTotal), v_(kTotal) {
    for (uint64_t i = 0; i < kTotal; ++i) params_[i] = InitValue(i);
  }
  void Step(int64_t t) {
    const HostGroups groups = HostGroups::Of(config_);
    const bool bf16 = config_.cluster().gradient_dtype() == proto::ClusterConfig::BF16;
    const std::vector<int> sizes = groups.summing() ? groups.sizes() : std::vector<int>{config_.cluster().workers()};
    Pushed job;
    uint64_t tokens = 0;
    int w = 0;
    for (int size : sizes) {
      Pushed group;
      for (const int end = w + size; w < end; ++w) {
        AddPushed(&group, PushedBy(w, t, bf16));
        tokens += Tokens(w, t);
      }
      if (groups.summing() && bf16) {
        for (float& x : group.dense) x = Bf16(x);
        for (float& x : group.rows) x = Bf16(x);
      }
      AddPushed(&job, group);
    }
    for (uint64_t e = 0; e < kEmbed; ++e) {
      if (job.named[e] != 0) job.dense[e] += job.rows[e];
    }
    NormalizeGradient(kTotal, tokens, job.dense.data());
    AdamHyper hyper{config_.optimizer().beta1(), config_.optimizer().beta2(), config_.optimizer().epsilon()};
    AdamUpdate(hyper, t, LearningRate(config_, t), kTotal, job.dense.data(), params_.data(), m_.data(), v_.data());
  }
  std::vector<float> Run(int steps) {
    for (int64_t t = 1; t <= steps; ++t) Step(t);
    return params_;
  }

 private:
  proto::JobConfig config_;
  std::vector<float> params_, m_, v_;  // (kTotal)
};

// What a test does to the PUSHes a Van sends: keeps a copy of each (header and payload frames),
// and drops, or sends twice, the first of step `step` and part `part`.
struct PushTap {
  enum Act { kKeep, kDrop, kDuplicate } act = kKeep;
  int64_t step = 0;
  proto::PushPart part = proto::ROWS;
  struct Sent {
    proto::Header header;
    std::vector<std::string> payload;
  };
  std::mutex mu;
  std::vector<Sent> sent;
  int acted = 0;
};

class TappedVan : public ForwardingVan {
 public:
  TappedVan(std::unique_ptr<Van> inner, std::shared_ptr<PushTap> tap) : ForwardingVan(std::move(inner)), tap_(tap) {}
  Status Send(RawMessage message) override {
    proto::Header h;
    if (message.frames.empty() ||
        !h.ParseFromArray(message.frames[0].data(), static_cast<int>(message.frames[0].size())) ||
        h.type() != proto::PUSH) {
      return inner_->Send(std::move(message));
    }
    std::lock_guard<std::mutex> lock(tap_->mu);
    PushTap::Sent copy{h, {}};
    for (size_t f = 1; f < message.frames.size(); ++f) copy.payload.emplace_back(message.frames[f].bytes());
    tap_->sent.push_back(std::move(copy));
    if (tap_->act == PushTap::kKeep || tap_->acted > 0 || h.step() != tap_->step || h.part() != tap_->part) {
      return inner_->Send(std::move(message));
    }
    ++tap_->acted;
    if (tap_->act == PushTap::kDrop) return Status::Ok();  // lost on the way
    RawMessage twice = message;                            // the frames share their owners
    PSF_RETURN_IF_ERROR(inner_->Send(std::move(twice)));
    return inner_->Send(std::move(message));
  }

 private:
  std::shared_ptr<PushTap> tap_;
};

// Taps the Vans of the workers or aggregators `taps` names (by index).
VanWrapper Tapping(std::map<int, std::shared_ptr<PushTap>> taps) {
  return [taps = std::move(taps)](int index, std::unique_ptr<Van> van) -> std::unique_ptr<Van> {
    const auto it = taps.find(index);
    if (it == taps.end()) return van;
    return std::make_unique<TappedVan>(std::move(van), it->second);
  };
}

// The values of a sum as sent (a ROWS sum's after its run table), as floats.
std::vector<float> SentValues(const PushTap::Sent& sent) {
  std::string bytes;
  const size_t first = (sent.header.part() == proto::ROWS || sent.header.named()) && sent.header.runs() > 0 ? 1 : 0;
  for (size_t f = first; f < sent.payload.size(); ++f) bytes += sent.payload[f];
  std::vector<float> values;
  if (sent.header.dtype() == proto::BFLOAT16) {
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i, sizeof(h));
      values.push_back(Bf16ToFloat(h));
    }
  } else {
    values.resize(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  }
  return values;
}

// Checks the sums aggregator `g` of `config` sent up over `steps` steps (tap.sent; a resend is the
// same sum): each piece's WHOLE sum, or a split piece's DENSE and ROWS sums, once per step. Each
// element is, bitwise, the fp32 sum of the group's pushes in worker order (rounded to bf16 where
// the job pushes bf16), and within that order's rounding of their fp64 sum; a ROWS sum names
// exactly the elements some worker of the group looked up, and carries the group's tokens.
void ExpectGroupSums(const proto::JobConfig& config, int g, int steps, const PushTap& tap, bool named_rows = false) {
  const HostGroups groups = HostGroups::Of(config);
  const bool bf16 = config.cluster().gradient_dtype() == proto::ClusterConfig::BF16;
  const PieceTable table = JobPieceTable(config, kTotal, kSplitCuts);
  std::map<std::tuple<int64_t, int, int>, const PushTap::Sent*> sums;  // (step, piece, part): the first sent
  for (const PushTap::Sent& sent : tap.sent) {
    sums.emplace(
        std::make_tuple(sent.header.step(), table.IndexAt(sent.header.begin()), static_cast<int>(sent.header.part())),
        &sent);
  }
  size_t per_step = 0;
  for (const Piece& piece : table.pieces()) per_step += piece.split ? 2 : 1;
  ASSERT_TRUE(table.has_split());
  EXPECT_EQ(sums.size(), static_cast<size_t>(steps) * per_step);
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<Pushed> pushed;
    uint64_t tokens = 0;
    for (int w = groups.first(g); w < groups.first(g) + groups.size(g); ++w) {
      pushed.push_back(PushedBy(w, t, bf16));
      tokens += Tokens(w, t);
    }
    for (int p = 0; p < static_cast<int>(table.pieces().size()); ++p) {
      const Piece& piece = table.pieces()[p];
      for (const proto::PushPart part : piece.split ? std::vector<proto::PushPart>{proto::DENSE, proto::ROWS}
                                                    : std::vector<proto::PushPart>{proto::WHOLE}) {
        SCOPED_TRACE("group " + std::to_string(g) + ", step " + std::to_string(t) + ", piece " + std::to_string(p) +
                     " " + proto::PushPart_Name(part));
        const auto it = sums.find({t, p, static_cast<int>(part)});
        ASSERT_NE(it, sums.end());
        const PushTap::Sent& sent = *it->second;
        EXPECT_EQ(sent.header.target_tokens(), tokens);
        EXPECT_EQ(sent.header.loss_sum(), static_cast<double>(groups.size(g)));
        // The model elements the sum's values are of, in order.
        std::vector<uint64_t> elements;
        std::vector<uint64_t> named;  // what the group's lookups name in the piece
        for (uint64_t e = piece.model_begin; e < piece.model_begin + piece.size() && e < kEmbed; ++e) {
          if (std::any_of(pushed.begin(), pushed.end(), [&](const Pushed& x) { return x.named[e] != 0; })) {
            named.push_back(e);
          }
        }
        // The elements a run table names (a ROWS sum's, or a named DENSE sum's).
        const auto table = [&] {
          std::vector<uint64_t> in_table;
          EXPECT_EQ(sent.payload.empty() ? 0 : sent.payload[0].size(), sent.header.runs() * kRunBytes);
          for (uint32_t r = 0; r < sent.header.runs() && !sent.payload.empty(); ++r) {
            ElementRun run;
            std::memcpy(&run, sent.payload[0].data() + r * kRunBytes, kRunBytes);
            for (uint32_t i = 0; i < run.length; ++i) in_table.push_back(piece.model_begin + run.offset + i);
          }
          return in_table;
        };
        if (part == proto::DENSE) {
          // Named up front by every worker of the group: the sum names their union.
          EXPECT_EQ(sent.header.named(), named_rows);
          if (named_rows) {
            EXPECT_EQ(table(), named);
          }
        }
        if (part == proto::ROWS) {
          elements = table();
          EXPECT_EQ(elements, named);
          EXPECT_GT(named.size(), 0u);
        } else {
          for (uint64_t e = piece.model_begin; e < piece.model_begin + piece.size(); ++e) elements.push_back(e);
        }
        const std::vector<float> values = SentValues(sent);
        ASSERT_EQ(values.size(), elements.size());
        int not_ordered = 0, not_close = 0;
        for (size_t k = 0; k < elements.size(); ++k) {
          const uint64_t e = elements[k];
          float ordered = 0;
          double exact = 0, magnitude = 0;
          int terms = 0;
          for (const Pushed& x : pushed) {
            if (part == proto::ROWS && x.named[e] == 0) continue;
            const float v = part == proto::ROWS ? x.rows[e] : x.dense[e];
            ordered = terms++ == 0 ? v : ordered + v;
            exact += v;
            magnitude += std::fabs(v);
          }
          if (bf16) ordered = Bf16(ordered);
          double bound = (terms - 1) * std::ldexp(magnitude, -24);
          if (bf16) bound += std::ldexp(std::fabs(exact) + bound, -8);
          if (std::memcmp(&values[k], &ordered, sizeof(float)) != 0 && not_ordered++ == 0) {
            ADD_FAILURE() << "element " << e << ": sent " << values[k] << ", the worker-order sum " << ordered;
          }
          if (std::fabs(values[k] - exact) > bound && not_close++ == 0) {
            ADD_FAILURE() << "element " << e << ": sent " << values[k] << ", the fp64 sum " << exact << " (bound "
                          << bound << ")";
          }
        }
        EXPECT_EQ(not_ordered, 0);
        EXPECT_EQ(not_close, 0);
      }
    }
  }
}

// (The servers need two host groups or more to sum groups at all: [3, 1] is the grouping whose
// order is the flat one, the first group the flat sum's first three workers.)
TEST(HostSummingSplit, AGroupOfAllWorkersButTheLastGivesTheFlatJobsBits) {
  const int steps = 3;
  const GroupedRun grouped = RunJob(SplitConfig({3, 1}, 2), steps, SplitRun());
  const GroupedRun flat = RunJob(SplitConfig({4}, 2), steps, SplitRun());
  EXPECT_TRUE(BitwiseEqual(grouped.params, flat.params));
  // Against the independent reference, which the flat job's servers give too.
  EXPECT_TRUE(BitwiseEqual(flat.params, SplitReference(SplitConfig({4}, 2)).Run(steps)));
  // The test can fail: without its lookups' gradient the job ends elsewhere.
  ReferenceTrainer dense_only(GroupedConfig({4}, 2), kTotal);
  for (int64_t t = 1; t <= steps; ++t) dense_only.Step(t);
  EXPECT_FALSE(BitwiseEqual(flat.params, dense_only.params()));
}

TEST(HostSummingSplit, TwoGroupsSendTheirDenseAndRowsSumsApartAndTheServersAddThem) {
  const int steps = 3;
  for (const bool bf16 : {false, true}) {
    // Rows named up front (the group's DENSE sum names them) change when, not what, is summed.
    const bool named = bf16;
    SCOPED_TRACE(bf16 ? "bf16, rows named" : "fp32");
    const proto::JobConfig config = SplitConfig({3, 2}, 2, bf16);
    auto taps =
        std::map<int, std::shared_ptr<PushTap>>{{0, std::make_shared<PushTap>()}, {1, std::make_shared<PushTap>()}};
    RunOptions options = SplitRun();
    options.aggregator_van = Tapping(taps);
    options.named = named;
    const GroupedRun run = RunJob(config, steps, options);
    for (int g = 0; g < 2; ++g) ExpectGroupSums(config, g, steps, *taps[g], named);
    const std::vector<float> expected = SplitReference(config).Run(steps);
    EXPECT_TRUE(BitwiseEqual(run.params, expected));
    // The grouping's order is not the flat job's: these are other bits.
    EXPECT_FALSE(BitwiseEqual(expected, SplitReference(SplitConfig({5}, 2, bf16)).Run(steps)));
  }
}

TEST(HostSummingSplit, ADuplicatedAndALostRowsPushAreEachTakenOnce) {
  const proto::JobConfig config = SplitConfig({2, 2}, 2);
  const int steps = 4;
  const auto tap = [](PushTap::Act act, int64_t step) {
    auto t = std::make_shared<PushTap>();
    t->act = act;
    t->step = step;
    return t;
  };
  // Worker 0's ROWS push of step 2 is lost (its client sends it again), worker 3's arrives
  // twice; aggregator 0's ROWS sum of step 3 is lost (it sends it again), aggregator 1's
  // arrives twice.
  const std::map<int, std::shared_ptr<PushTap>> workers{{0, tap(PushTap::kDrop, 2)}, {3, tap(PushTap::kDuplicate, 2)}};
  const std::map<int, std::shared_ptr<PushTap>> aggregators{{0, tap(PushTap::kDrop, 3)},
                                                            {1, tap(PushTap::kDuplicate, 3)}};
  RunOptions options = SplitRun();
  options.worker_van = Tapping(workers);
  options.aggregator_van = Tapping(aggregators);
  options.named = true;  // and the rest of each embedding piece updated before the rows come
  const GroupedRun run = RunJob(config, steps, options);
  for (const auto& taps : {workers, aggregators}) {
    for (const auto& [index, t] : taps) EXPECT_EQ(t->acted, 1) << index;
  }
  EXPECT_GE(run.resends[0], 1u);           // the lost sum, sent again
  EXPECT_GE(run.duplicate_shares[1], 1u);  // worker 3's second copy
  EXPECT_GE(run.server_duplicates, 1u);    // aggregator 1's second copy
  // Each ROWS part was added exactly once.
  EXPECT_TRUE(BitwiseEqual(run.params, SplitReference(config).Run(steps)));
}

TEST(HostSummingSplit, AnAggregatorKilledMidStepLosesNeitherPart) {
  const proto::JobConfig config = SplitConfig({2, 2}, 2);
  for (const bool named : {false, true}) {
    SCOPED_TRACE(named ? "rows named" : "rows not named");
    RunOptions options = SplitRun();
    options.restart_at = 2;       // DENSE shares held and sums on their way
    options.restart_rows_at = 3;  // a ROWS share held
    options.named = named;
    const GroupedRun run = RunJob(config, 4, options);
    EXPECT_TRUE(BitwiseEqual(run.params, SplitReference(config).Run(4)));
  }
}

}  // namespace
}  // namespace psformer::testing
