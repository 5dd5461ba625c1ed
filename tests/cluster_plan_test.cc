#include "launcher/cluster_plan.h"

#include <gtest/gtest.h>

namespace psformer {
namespace {

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
  ClusterPlanOptions options;
  options.servers = 2;
  options.workers = 16;
  options.gpu_workers = true;
  options.gpus_per_host = {{"n0", 8}, {"n1", 8}};
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
  auto plan = ClusterPlan::Make(options, {"a", "a"});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("2 processes were started but the config needs"), std::string::npos)
      << plan.status().message();
  EXPECT_NE(plan.status().message().find("mpirun -np 3"), std::string::npos) << plan.status().message();
}

TEST(ClusterPlan, MoreGpuWorkersThanGpusIsRefused) {
  ClusterPlanOptions options;
  options.servers = 1;
  options.workers = 3;
  options.gpu_workers = true;
  options.gpus_per_host = {{"a", 2}};
  auto plan = ClusterPlan::Make(options, {"a", "a", "a", "a"});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("more GPU workers (at least 3) than it has GPUs (2)"), std::string::npos)
      << plan.status().message();
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

}  // namespace
}  // namespace psformer
