// Servers checkpoint at the same steps and resume from the newest complete checkpoint; a run
// resumed from a checkpoint ends bitwise equal to one that never stopped, also when the newest
// checkpoint is corrupt and an older one is used.
#include <filesystem>
#include <fstream>

#include "tests/pserver_test_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kTotal = 5003;
constexpr int kWorkers = 2;

proto::JobConfig CheckpointingConfig() {
  proto::JobConfig config = PsConfig(kWorkers, 2, proto::ClusterConfig::BSP);
  config.mutable_checkpoint()->set_every_steps(2);
  return config;
}

// Resumes (or starts) the job and runs steps up to `last`; returns the final parameters.
std::vector<float> RunSteps(const std::string& run_dir, bool resume, int64_t expect_first, int64_t last) {
  ServerGroup group(CheckpointingConfig(), kTotal, run_dir, resume);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < kWorkers; ++w) clients.push_back(MakeClient(group, kTotal, w, proto::FLOAT32, 1));
  auto resumed_at = clients[0]->Hello();
  EXPECT_TRUE(resumed_at.ok());
  EXPECT_EQ(*resumed_at, expect_first - 1);
  std::vector<float> params(kTotal);
  for (int64_t t = expect_first; t <= last; ++t) {
    for (int w = 0; w < kWorkers; ++w) {
      EXPECT_TRUE(clients[w]->Wait(*clients[w]->Pull(t - 1, params.data())).ok());
      const auto g = Gradient(w, t, kTotal);
      EXPECT_TRUE(clients[w]->Wait(*clients[w]->Push(t, g.data(), Tokens(w, t), 0)).ok());
    }
  }
  EXPECT_TRUE(clients[0]->Wait(*clients[0]->Pull(last, params.data())).ok());
  return params;
}

std::vector<float> Reference(int64_t steps) {
  ReferenceTrainer ref(CheckpointingConfig(), kTotal);
  for (int64_t t = 1; t <= steps; ++t) ref.Step(t);
  return ref.params();
}

TEST(PserverCheckpoint, ResumedRunEqualsUninterruptedRun) {
  TempDir dir;
  const std::string run = dir.path().string();
  EXPECT_TRUE(BitwiseEqual(RunSteps(run, false, 1, 4), Reference(4)));
  const CheckpointIdentity id{2, kTotal, 0};
  EXPECT_TRUE(VerifyCheckpoint(run, 2, id).ok());
  EXPECT_TRUE(VerifyCheckpoint(run, 4, id).ok());
  EXPECT_TRUE(BitwiseEqual(RunSteps(run, true, 5, 6), Reference(6)));
}

TEST(PserverCheckpoint, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  TempDir dir;
  const std::string run = dir.path().string();
  RunSteps(run, false, 1, 4);
  const std::string victim = (fs::path(CheckpointDir(run, 4)) / ShardFileName(1, 2)).string();
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x7f');
  }
  // Both shards go back to step 2 (a consistent cut), and steps 3..6 are replayed.
  EXPECT_TRUE(BitwiseEqual(RunSteps(run, true, 3, 6), Reference(6)));
}

}  // namespace
}  // namespace psformer::testing
