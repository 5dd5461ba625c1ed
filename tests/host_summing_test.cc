// Host summing (pserver/aggregator/host_aggregator.h): each host group's aggregator sums its
// workers' pushes in worker order and the servers add the groups' sums in group order. Checked
// against an independent reference of that order, bitwise; a grouping of one worker each gives
// the flat path's bits; each aggregator sends one model's worth a step; an aggregator restarted
// in the middle of a step loses nothing; what does not belong is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/host_groups.h"
#include "tests/test_util.h"
#include "pserver/aggregator/host_aggregator.h"
#include "pserver/wire/piece_table.h"
#include "tests/pserver_test_util.h"

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

// One aggregator per group, each Run on its own thread, reachable at ipc:// paths in `dir`.
class AggregatorGroup {
 public:
  AggregatorGroup(const proto::JobConfig& config, const ServerGroup& servers, const std::string& dir) {
    for (int g = 0; g < HostGroups::Of(config).count(); ++g) {
      HostAggregatorOptions o;
      o.config = config;
      o.group = g;
      o.parameter_count = kTotal;
      o.layer_starts = kCuts;
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
    auto made = HostAggregator::Create(std::move(o), std::make_unique<ZmqVan>());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    aggregators_[g] = std::move(made).value();
    threads_[g] = std::thread([a = aggregators_[g].get()] { EXPECT_TRUE(a->Run().ok()); });
  }
  std::string endpoint(int g) const { return options_[g].endpoint; }
  const HostAggregator& aggregator(int g) const { return *aggregators_[g]; }

 private:
  std::vector<HostAggregatorOptions> options_;
  std::vector<std::unique_ptr<HostAggregator>> aggregators_;
  std::vector<std::thread> threads_;
};

struct GroupedRun {
  std::vector<float> params;
  std::vector<uint64_t> bytes_up;    // per aggregator, over the run
  std::vector<uint64_t> pulls_sent;  // per aggregator
};

// `steps` BSP steps of the grouped job, every worker pushing in layer-sized reports as backward
// would, then pulling. With `restart_at` > 0, aggregator 0 is killed when half of that step's
// reports are in, and started again (incarnation 1) on the same endpoint.
GroupedRun RunGrouped(const proto::JobConfig& config, int steps, int restart_at = 0) {
  TempDir dir;
  const int workers = config.cluster().workers();
  const HostGroups groups = HostGroups::Of(config);
  const auto pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, kCuts));
  ServerGroup servers(config, kTotal, "", false, 2, kCuts);
  AggregatorGroup aggregators(config, servers, dir.path().string());
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < workers; ++w) {
    PsClientOptions o;
    o.pieces = pieces;
    o.job_id = kJobId;
    o.id = static_cast<uint32_t>(w);
    o.servers = servers.endpoints();
    o.aggregator = aggregators.endpoint(groups.GroupOf(w));
    o.parameter_count = kTotal;
    o.frame_bytes = 4096;
    o.timeout_ms = 20000;
    o.retry_ms = 200;
    auto client = PsClient::Create(std::move(o));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (!client.ok()) return {};
    clients.push_back(std::move(client).value());
  }
  std::vector<std::vector<float>> params(workers, std::vector<float>(kTotal));
  std::vector<PsClient::Ticket> pulls(workers);
  for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(0, params[w].data());
  std::vector<uint64_t> bounds = kCuts;
  bounds.insert(bounds.begin(), 0);
  bounds.push_back(kTotal);
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> grads(workers);
    std::vector<PsClient::Ticket> pushes(workers);
    for (int w = 0; w < workers; ++w) {
      Status s = clients[w]->Wait(pulls[w]);
      EXPECT_TRUE(s.ok()) << s.ToString();
      grads[w] = Gradient(w, t, kTotal);
      pushes[w] = *clients[w]->BeginPush(t, grads[w].data(), Tokens(w, t), 1.0);
    }
    for (size_t layer = bounds.size() - 1; layer > 0; --layer) {
      if (t == restart_at && layer == bounds.size() / 2) {
        // Some sums of this step are on their way, some shares held: all of it is lost.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        aggregators.Kill(0);
        aggregators.Start(0, 1);
      }
      for (int w = 0; w < workers; ++w) {
        EXPECT_TRUE(clients[w]->PushReady(pushes[w], bounds[layer - 1], bounds[layer]).ok());
      }
    }
    for (int w = 0; w < workers; ++w) pulls[w] = *clients[w]->Pull(t, params[w].data());
    for (int w = 0; w < workers; ++w) {
      Status s = clients[w]->Wait(pushes[w]);
      EXPECT_TRUE(s.ok()) << "worker " << w << ", step " << t << ": " << s.ToString();
    }
  }
  for (int w = 0; w < workers; ++w) {
    Status s = clients[w]->Wait(pulls[w]);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (int w = 1; w < workers; ++w) EXPECT_TRUE(BitwiseEqual(params[w], params[0]));
  GroupedRun run;
  run.params = params[0];
  for (int g = 0; g < groups.count(); ++g) {
    run.bytes_up.push_back(aggregators.aggregator(g).stats().bytes_up.load());
    run.pulls_sent.push_back(aggregators.aggregator(g).stats().pulls_sent.load());
  }
  return run;
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

}  // namespace
}  // namespace psformer::testing
