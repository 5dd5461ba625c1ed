// Each role process of a host gets an equal share of its cores for its passes over payloads
// (common/role_threads.h): the supervisor hands it to every role it starts, and a config that
// names cluster.threads_per_process keeps that count.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>

#include "common/role_threads.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::ReadTextFile;
using testing::TempDir;

int Cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

TEST(HostShare, TheCoresByWeightAtLeastOne) {
  EXPECT_EQ(HostShareThreads(1, 1), Cores());
  EXPECT_EQ(HostShareThreads(1, 3), std::max(1, Cores() / 3));
  EXPECT_EQ(HostShareThreads(2, 3), std::max(1, 2 * Cores() / 3));
  EXPECT_EQ(HostShareThreads(1, Cores() * 4), 1);
  EXPECT_EQ(HostShareThreads(0, 0), Cores());  // nothing to share with
}

TEST(HostShare, AServerWeighsThePushesItSumsAnAggregatorItsGroup) {
  proto::JobConfig config;
  config.mutable_cluster()->set_workers(8);
  config.mutable_cluster()->set_servers(2);
  EXPECT_EQ(PayloadWeight(config, /*server=*/false, /*aggregator=*/false, 0), 1);
  EXPECT_EQ(PayloadWeight(config, true, false, 0), 4);  // 8 workers' pushes over 2 servers
  config.mutable_cluster()->set_workers(1);
  EXPECT_EQ(PayloadWeight(config, true, false, 0), 1);  // the measured case: 1 worker, 2 servers
  config.mutable_cluster()->set_workers(6);
  config.mutable_cluster()->set_servers(1);
  config.mutable_cluster()->set_host_summing(true);
  for (int size : {4, 2}) config.mutable_cluster()->add_host_groups(size);
  EXPECT_EQ(PayloadWeight(config, true, false, 0), 2);  // two aggregators push to it
  EXPECT_EQ(PayloadWeight(config, false, true, 0), 4);  // group 0 sums 4 workers
  EXPECT_EQ(PayloadWeight(config, false, true, 1), 2);
}

TEST(HostShare, SetForThisProcessItWinsOverTheConfig) {
  proto::JobConfig config;
  config.mutable_cluster()->set_threads_per_process(7);
  EXPECT_EQ(ClientPayloadThreads(config), 7);
  EXPECT_EQ(ServerPayloadThreads(config), 7);
  SetPayloadThreads(2);
  EXPECT_EQ(ClientPayloadThreads(config), 2);
  EXPECT_EQ(ServerPayloadThreads(config), 2);
  SetPayloadThreads(0);
  config.mutable_cluster()->set_threads_per_process(0);
  EXPECT_EQ(ServerPayloadThreads(config), Cores());
}

const char kJob[] =
    "--config configs/copy.pbtxt --set training.max_steps=2 --set training.valid_every=0 "
    "--set checkpoint.every_steps=0 --set cluster.workers=2 --set cluster.servers=2";

std::string ServerThreadsLine(const std::string& log) {
  const size_t at = log.find(" thread(s) for its sums");
  if (at == std::string::npos) return "";
  const size_t from = log.rfind("; ", at);
  return log.substr(from + 2, at - from - 2);
}

TEST(HostShare, WithOverlapTheSupervisorGivesEachRoleItsShareUnlessTheConfigSays) {
  TempDir dir;
  auto with_share = testing::RunPsformer(std::string("train ") + kJob + " --run-dir " + dir.File("with_share"));
  ASSERT_EQ(with_share.exit_status, 0) << with_share.output;
  // Two workers and two servers on this machine, each server summing one worker's share of the
  // pushes: a quarter of its cores each.
  for (const char* server : {"pserver-0", "pserver-1"}) {
    EXPECT_EQ(ServerThreadsLine(ReadTextFile(dir.File(std::string("with_share/logs/") + server + ".log"))),
              std::to_string(HostShareThreads(1, 4)))
        << server;
  }
  auto named = testing::RunPsformer(std::string("train ") + kJob + " --set cluster.threads_per_process=3 --run-dir " +
                                    dir.File("named"));
  ASSERT_EQ(named.exit_status, 0) << named.output;
  EXPECT_EQ(ServerThreadsLine(ReadTextFile(dir.File("named/logs/pserver-0.log"))), "3");
  // Without overlap a server updates while the workers wait: every core.
  auto alone = testing::RunPsformer(std::string("train ") + kJob + " --set cluster.overlap=false --run-dir " +
                                    dir.File("alone"));
  ASSERT_EQ(alone.exit_status, 0) << alone.output;
  EXPECT_EQ(ServerThreadsLine(ReadTextFile(dir.File("alone/logs/pserver-0.log"))), std::to_string(Cores()));
}

TEST(HostShare, ARoleRefusesANegativeThreadCount) {
  for (const char* role : {"worker --servers tcp://x:1", "pserver --endpoint tcp://x:1"}) {
    auto r = testing::RunPsformer(std::string(role) +
                                  " --config configs/copy.pbtxt --run-dir /nonexistent --index 0 --threads -2");
    EXPECT_EQ(r.exit_status, 2) << role << ": " << r.output;
    EXPECT_NE(r.output.find("--threads -2 must be >= 0"), std::string::npos) << role << ": " << r.output;
  }
}

}  // namespace
}  // namespace psformer
