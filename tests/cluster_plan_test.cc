#include "launcher/cluster_plan.h"

#include <gtest/gtest.h>

namespace psformer {
namespace {

// `servers` servers and `workers` GPU workers on hosts with these GPU counts.
ClusterPlanOptions GpuJob(int servers, int workers, std::vector<std::pair<std::string, int>> gpus_per_host) {
  ClusterPlanOptions options;
  options.servers = servers;
  options.workers = workers;
  options.gpu_workers = true;
  options.gpus_per_host = std::move(gpus_per_host);
  return options;
}

// Whether Make refuses the processes started on `hosts` with a message that says `text`.
::testing::AssertionResult RefusedSaying(const ClusterPlanOptions& options, const std::vector<std::string>& hosts,
                                         const std::string& text) {
  auto plan = ClusterPlan::Make(options, hosts);
  if (plan.ok()) return ::testing::AssertionFailure() << "a plan was made, not refused saying \"" << text << "\"";
  if (plan.status().message().find(text) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected \"" << text << "\" in: " << plan.status().message();
  }
  return ::testing::AssertionSuccess();
}

TEST(ClusterPlan, OneHostServersTakeTheHighestSlots) {
  ClusterPlanOptions options;
  options.servers = 1;
  options.workers = 2;
  auto plan = ClusterPlan::Make(options, {"a", "a", "a"});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->server(0).slot, 2);
  EXPECT_EQ(plan->worker(0).slot, 0);
  EXPECT_EQ(plan->worker(1).slot, 1);
  EXPECT_EQ(plan->slot(0).name(), "worker-0");
  EXPECT_EQ(plan->slot(2).name(), "pserver-0");
}

TEST(ClusterPlan, TwoNodesOfEightGpusSpreadServersAndNumberGpusByLocalRank) {
  const ClusterPlanOptions options = GpuJob(2, 16, {{"n0", 8}, {"n1", 8}});
  std::vector<std::string> hosts;
  for (int i = 0; i < 9; ++i) hosts.push_back("n0");
  for (int i = 0; i < 9; ++i) hosts.push_back("n1");
  auto plan = ClusterPlan::Make(options, hosts);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->server(0).host, "n0");
  EXPECT_EQ(plan->server(1).host, "n1");
  EXPECT_EQ(plan->hosts(), 2);
  for (int w = 0; w < 16; ++w) {
    EXPECT_EQ(plan->worker(w).local_gpu, w % 8) << w;
    EXPECT_EQ(plan->worker(w).host, w < 8 ? "n0" : "n1") << w;
  }
}

TEST(ClusterPlan, WrongProcessCountSaysWhatIsNeeded) {
  ClusterPlanOptions options;
  options.servers = 1;
  options.workers = 2;
  EXPECT_TRUE(RefusedSaying(options, {"a", "a"}, "2 processes were started but the config needs"));
  EXPECT_TRUE(RefusedSaying(options, {"a", "a"}, "mpirun -np 3"));
}

TEST(ClusterPlan, MoreGpuWorkersThanGpusIsRefused) {
  EXPECT_TRUE(
      RefusedSaying(GpuJob(1, 3, {{"a", 2}}), {"a", "a", "a", "a"}, "host a would run 3 GPU workers but has 2 GPU(s)"));
}

TEST(ClusterPlan, OversubscriptionNamesTheHostThatHasTooFewGpus) {
  // n0 holds the server and two workers on its two GPUs; n1 would run two workers on one GPU.
  EXPECT_TRUE(RefusedSaying(GpuJob(1, 4, {{"n0", 2}, {"n1", 1}}), {"n0", "n0", "n0", "n1", "n1"},
                            "host n1 would run 2 GPU workers but has 1 GPU(s)"));
}

TEST(ClusterPlan, AHostMissingFromTheGpuListHasNoGpus) {
  EXPECT_TRUE(RefusedSaying(GpuJob(1, 1, {}), {"a", "a"}, "host a would run 1 GPU workers but has 0 GPU(s)"));
}

TEST(ClusterPlan, CpuWorkersGetNoGpu) {
  ClusterPlanOptions options;
  options.servers = 1;
  options.workers = 2;
  auto plan = ClusterPlan::Make(options, {"a", "a", "a"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->worker(0).local_gpu, -1);
  EXPECT_EQ(plan->worker(1).local_gpu, -1);
}

TEST(ChooseGpuWorkers, CpuNeverUsesGpus) {
  auto gpu = ChooseGpuWorkers(proto::ClusterConfig::CPU, {{"a", 8}});
  ASSERT_TRUE(gpu.ok());
  EXPECT_FALSE(*gpu);
}

TEST(ChooseGpuWorkers, AutoFollowsTheHosts) {
  auto with = ChooseGpuWorkers(proto::ClusterConfig::AUTO, {{"a", 8}, {"b", 8}});
  ASSERT_TRUE(with.ok());
  EXPECT_TRUE(*with);
  auto without = ChooseGpuWorkers(proto::ClusterConfig::AUTO, {{"a", 0}, {"b", 0}});
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(*without);
}

TEST(ChooseGpuWorkers, AutoRefusesAMixAndNamesBothHosts) {
  auto mixed = ChooseGpuWorkers(proto::ClusterConfig::AUTO, {{"a", 8}, {"b", 0}});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("host a has 8 GPU(s) and host b has none"), std::string::npos)
      << mixed.status().message();
}

TEST(ChooseGpuWorkers, CudaWithoutAGpuNamesTheHost) {
  auto gpu = ChooseGpuWorkers(proto::ClusterConfig::CUDA, {{"a", 8}, {"b", 0}});
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("cluster.backend = CUDA but host b has no GPU (CUDA device count 0)"),
            std::string::npos)
      << gpu.status().message();
  auto ok = ChooseGpuWorkers(proto::ClusterConfig::CUDA, {{"a", 1}});
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(*ok);
}

TEST(ClusterPlan, MoreServersThanHostsWrapAround) {
  ClusterPlanOptions options;
  options.servers = 3;
  options.workers = 1;
  auto plan = ClusterPlan::Make(options, {"a", "a", "b", "b"});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->server(0).host, "a");
  EXPECT_EQ(plan->server(1).host, "b");
  EXPECT_EQ(plan->server(2).host, "a");
  EXPECT_EQ(plan->workers(), 1);
  EXPECT_EQ(plan->worker(0).host, "b");
}

// A host-summing job of `servers` servers on ranks started on `hosts`, its groups resolved into
// *config from `groups` as given (empty: one per host).
Status ResolveGroups(int servers, const std::vector<std::string>& hosts, std::vector<int> groups,
                     proto::JobConfig* config) {
  ClusterPlanOptions options;
  options.servers = servers;
  options.workers = static_cast<int>(hosts.size()) - servers;
  auto plan = ClusterPlan::Make(options, hosts);
  if (!plan.ok()) return plan.status();
  config->mutable_cluster()->set_host_summing(true);
  config->mutable_cluster()->set_workers(options.workers);
  for (int g : groups) config->mutable_cluster()->add_host_groups(g);
  return ResolveHostGroups(*plan, config);
}

TEST(ResolveHostGroups, WithoutGroupsEachHostsWorkersAreOneGroup) {
  proto::JobConfig config;
  // Server 0 takes a's highest slot: workers 0, 1 on a, 2, 3, 4 on b.
  ASSERT_TRUE(ResolveGroups(1, {"a", "a", "a", "b", "b", "b"}, {}, &config).ok());
  ASSERT_EQ(config.cluster().host_groups_size(), 2);
  EXPECT_EQ(config.cluster().host_groups(0), 2);
  EXPECT_EQ(config.cluster().host_groups(1), 3);
}

TEST(ResolveHostGroups, OneHostIsTheFlatPath) {
  proto::JobConfig config;
  ASSERT_TRUE(ResolveGroups(1, {"a", "a", "a"}, {}, &config).ok());
  EXPECT_EQ(config.cluster().host_groups_size(), 0);
}

TEST(ResolveHostGroups, AHostWhoseRanksAreNotConsecutiveIsRefusedWithTheAdvice) {
  proto::JobConfig config;
  const Status s = ResolveGroups(1, {"a", "b", "a", "b", "a", "b"}, {}, &config);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("are not consecutive"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--map-by slot"), std::string::npos) << s.message();
}

TEST(ResolveHostGroups, GivenGroupsMustShareAHostAndAddUpToTheWorkers) {
  proto::JobConfig across;
  Status s = ResolveGroups(1, {"a", "a", "a", "b", "b", "b"}, {1, 4}, &across);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("must share a host"), std::string::npos) << s.message();
  proto::JobConfig short_of;
  s = ResolveGroups(1, {"a", "a", "a", "b", "b", "b"}, {2, 2}, &short_of);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("add up to 4 workers, but the job has 5"), std::string::npos) << s.message();
  proto::JobConfig right;
  EXPECT_TRUE(ResolveGroups(1, {"a", "a", "a", "b", "b", "b"}, {2, 3}, &right).ok());
}

TEST(ReadHostReports, EveryRanksHostAndEachHostsGpusOnce) {
  std::vector<std::string> hosts;
  std::vector<std::pair<std::string, int>> gpus;
  ReadHostReports({"n0 8", "n0 8", "n1 4"}, &hosts, &gpus);
  EXPECT_EQ(hosts, (std::vector<std::string>{"n0", "n0", "n1"}));
  EXPECT_EQ(gpus, (std::vector<std::pair<std::string, int>>{{"n0", 8}, {"n1", 4}}));
}

}  // namespace
}  // namespace psformer
