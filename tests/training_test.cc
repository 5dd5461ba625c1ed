// End-to-end training through the parameter servers (label `integration`): single-node mode,
// cluster mode under real mpirun, and their agreement with the local trainer, all compared by
// `psformer checksum` of the final model.bin (docs/determinism.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::ModelDigest;
using testing::RunPsformerUnderMpirun;
using testing::TempDir;
using testing::TrainedModelDigest;
using testing::TrainSameModel;

// A short copy-task run: enough steps to move every parameter, few enough for a 2-core machine.
const char* kShort =
    "--config configs/copy.pbtxt --set training.max_steps=24 --set training.valid_every=12 "
    "--set logging.every_steps=6 --set checkpoint.every_steps=0";

TEST(Training, OneWorkerOneServerEqualsTheLocalTrainerBitwise) {
  TempDir dir;
  EXPECT_TRUE(
      TrainSameModel(dir, kShort, {{"local", "--local"}, {"bsp", "--set cluster.workers=1 --set cluster.servers=1"}}));
}

TEST(Training, ServerCountDoesNotChangeTheWeights) {
  TempDir dir;
  EXPECT_TRUE(
      TrainSameModel(dir, kShort,
                     {{"s1", "--set cluster.workers=2 --set cluster.servers=1"},
                      {"s2", "--set cluster.workers=2 --set cluster.servers=2"},
                      {"s3", "--set cluster.workers=2 --set cluster.servers=3"},
                      // Forward after the whole pull, not as it lands: the same values.
                      {"whole-pull",
                       "--set cluster.workers=2 --set cluster.servers=2 "
                       "--set cluster.forward_as_pulled=false"},
                      // The whole gradient pushed after backward, in one piece a server.
                      {"no-overlap", "--set cluster.workers=2 --set cluster.servers=2 --set cluster.overlap=false"}}));
  // With overlap or without, the pushes go with the CRCs the gradient's copy recorded: no pass
  // reads the gradient again to checksum it (only pieces with no whole 4 KiB block are read).
  for (const char* run : {"s2", "no-overlap"}) {
    const std::string logs = testing::ReadRunLogs(dir.path() / run);
    for (int worker : {0, 1}) EXPECT_GE(testing::PushPartsWithRecordedCrcs(logs, worker), 24) << run << "\n" << logs;
  }
}

TEST(Training, TwoRunsOfTheSameConfigAreBitwiseIdentical) {
  TempDir dir;
  EXPECT_TRUE(TrainSameModel(dir, kShort,
                             {{"a", "--set cluster.workers=2 --set cluster.servers=2"},
                              {"b", "--set cluster.workers=2 --set cluster.servers=2"}}));
}

TEST(Training, WritesTheRunDirectory) {
  TempDir dir;
  TrainedModelDigest(dir, kShort, {"run", "--set cluster.workers=2 --set cluster.servers=1"});
  const auto run = dir.path() / "run";
  for (const char* f :
       {"config.pbtxt", "metrics.jsonl", "model.bin", "logs/worker-0.log", "logs/worker-1.log", "logs/pserver-0.log"}) {
    EXPECT_TRUE(std::filesystem::exists(run / f)) << f;
  }
  std::ifstream metrics(run / "metrics.jsonl");
  std::string all((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  for (const char* field :
       {"\"loss\"", "\"lr\"", "\"tokens_per_s\"", "\"compute_s\"", "\"push_s\"", "\"pull_s\"", "\"valid_accuracy\""}) {
    EXPECT_NE(all.find(field), std::string::npos) << field << " missing from metrics.jsonl:\n" << all;
  }
}

TEST(Training, MpirunClusterModeEqualsSingleNodeMode) {
  TempDir dir;
  const std::string single =
      TrainedModelDigest(dir, kShort, {"single", "--set cluster.workers=2 --set cluster.servers=1"});
  const std::string run = dir.File("mpi");
  CommandResult r = RunPsformerUnderMpirun(
      3, std::string("train ") + kShort + " --set cluster.workers=2 --set cluster.servers=1 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(ModelDigest(run + "/model.bin"), single);
}

// --local under mpirun: every rank would train the whole model into the same run directory (and
// each say it had). Refused on every rank before anything is written.
TEST(Training, LocalUnderMpirunIsRefusedAndWritesNothing) {
  TempDir dir;
  const CommandResult r =
      RunPsformerUnderMpirun(2, std::string("train ") + kShort + " --local --run-dir " + dir.File("x"));
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("--local trains in this one process, and under mpirun every rank would train the same run"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("x")));
}

// Every rank loads the config on its own host. One that loaded another (an edited copy, other
// --set flags) is refused before any plan is made or anything written, naming each field that
// differs; a server count that differs too would otherwise have the ranks plan different roles.
TEST(Training, MpirunRanksWithDifferentConfigsAreRefusedNamingTheFields) {
  TempDir dir;
  const std::string job =
      std::string("train ") + kShort + " --set cluster.workers=2 --set cluster.servers=1 --run-dir " + dir.File("x");
  const CommandResult r = testing::RunPsformerRanksUnderMpirun(
      job, {{1, job}, {1, job + " --set optimizer.warmup_steps=77 --set cluster.servers=2"}});
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "did not load the job that rank 0 on ")) << r.output;
  EXPECT_TRUE(testing::HasText(r.output,
                               "optimizer.warmup_steps is 77 here and 200 on rank 0; cluster.servers is 2 "
                               "here and 1 on rank 0"))
      << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "psformer train: error: rank 2 on ")) << r.output;
  EXPECT_FALSE(testing::HasText(r.output, "error: rank 1 ")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("x")));
}

// A rank that runs another build of psformer (a stale binary on one host) is refused by the
// ranks' first collective, before any other could disagree and hang: here a copy of this binary
// whose commit is patched in place. The commit's first 8 characters are replaced wherever they
// stand: a short commit string is built from instructions' immediates (8 bytes, then the rest),
// not read whole from the binary's data.
TEST(Training, MpirunRanksOfAnotherBuildAreRefusedNamingBoth) {
  TempDir dir;
  const std::string version = testing::RunPsformer("version").output;
  const std::string commit = version.substr(9, 12);  // "psformer COMMIT..."
  if (version.rfind("psformer ", 0) != 0 || commit.find_first_not_of("0123456789abcdef") != std::string::npos) {
    GTEST_SKIP() << "not built from a git checkout: " << version;
  }
  std::string bytes = testing::ReadTextFile(testing::PsformerBinary());
  const std::string head = commit.substr(0, 8);
  const std::string other = std::string(head.size(), head[0] == '0' ? '1' : '0') + commit.substr(head.size());
  size_t patched = 0;
  for (size_t at = bytes.find(head); at != std::string::npos; at = bytes.find(head, at + 1), ++patched) {
    bytes.replace(at, head.size(), other.substr(0, head.size()));
  }
  ASSERT_GT(patched, 0u);
  const std::string stale = dir.File("psformer-stale");
  std::ofstream(stale, std::ios::binary) << bytes;
  std::filesystem::permissions(stale, std::filesystem::perms::owner_all);
  const std::string stale_version = testing::RunShell(stale + " version").output;
  ASSERT_TRUE(testing::HasText(stale_version, "psformer " + other)) << stale_version;

  const std::string job =
      std::string("train ") + kShort + " --set cluster.workers=2 --set cluster.servers=1 --run-dir " + dir.File("x");
  const CommandResult r =
      testing::RunShell("cd " + testing::SourceDir() + " && mpirun --allow-run-as-root --oversubscribe -np 2 " +
                        testing::PsformerBinary() + " " + job + " : -np 1 " + stale + " " + job);
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "psformer train: error: rank 2 runs psformer " + other)) << r.output;
  EXPECT_TRUE(testing::HasText(r.output, ", rank 0 psformer " + commit)) << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "every rank must run the same build")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("x")));
}

TEST(Training, MpirunWithTheWrongRankCountSaysWhatItNeeds) {
  TempDir dir;
  CommandResult r =
      RunPsformerUnderMpirun(2, std::string("train ") + kShort +
                                    " --set cluster.workers=2 --set cluster.servers=1 --run-dir " + dir.File("x"));
  EXPECT_NE(r.exit_status, 0);
  EXPECT_NE(r.output.find("2 processes were started but the config needs"), std::string::npos) << r.output;
  // --dry-run refuses it as the run would (it printed the config and exited 0), and passes the
  // right count, starting nothing.
  r = RunPsformerUnderMpirun(2, std::string("train ") + kShort +
                                    " --set cluster.workers=2 --set cluster.servers=1 --dry-run --run-dir " +
                                    dir.File("x"));
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("2 processes were started but the config needs"), std::string::npos) << r.output;
  r = RunPsformerUnderMpirun(3, std::string("train ") + kShort +
                                    " --set cluster.workers=2 --set cluster.servers=1 --dry-run --run-dir " +
                                    dir.File("x"));
  EXPECT_EQ(r.exit_status, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("x") + "/config.pbtxt"));
}

// The embedding's gradient in two parts (cluster.split_embedding): its own bits (another order of
// additions), the same with any server count, with the layers spread or not, and through a
// killed worker and a killed server.
TEST(Training, SplitEmbeddingWeightsDoNotDependOnServersSpreadOrFaults) {
  TempDir dir;
  const std::string split = " --set cluster.split_embedding=true --set cluster.workers=2";
  EXPECT_TRUE(
      TrainSameModel(dir, kShort,
                     {{"s1", split + " --set cluster.servers=1"},
                      {"s3", split + " --set cluster.servers=3"},
                      {"packed", split + " --set cluster.servers=2 --set cluster.spread_layers=false"},
                      {"killed", split + " --set cluster.servers=2 --set fault.kill=worker:1@10,server:0@17"}}));
  const std::string unsplit =
      TrainedModelDigest(dir, kShort, {"unsplit", "--set cluster.workers=2 --set cluster.servers=1"});
  EXPECT_NE(unsplit, ModelDigest(dir.File("s1") + "/model.bin")) << "the split changes the order of additions";
}

TEST(Training, AKilledWorkerIsRestartedAndTheWeightsDoNotChange) {
  TempDir dir;
  EXPECT_TRUE(
      TrainSameModel(dir, kShort,
                     {{"calm", "--set cluster.workers=2 --set cluster.servers=1"},
                      {"killed", "--set cluster.workers=2 --set cluster.servers=1 --set fault.kill=worker:1@10"}}));
  std::ifstream log(dir.path() / "killed" / "logs" / "supervisor.log");
  std::string all((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("restarting"), std::string::npos) << all;
}

}  // namespace
}  // namespace psformer
