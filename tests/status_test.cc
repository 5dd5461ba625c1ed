// `psformer status RUN_DIR` (launcher/run_status.h) on a job while it runs (a worker killed and
// restarted), on a finished one, after Ctrl-C, and on directories that are not runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <vector>

#include "tests/background_job.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::BackgroundJob;
using testing::CommandResult;
using testing::EndsSaying;
using testing::RunPsformer;
using testing::TempDir;

const char* kJob =
    "--config configs/copy.pbtxt --set training.stop_at_valid_accuracy=0 --set logging.every_steps=5 "
    "--set training.valid_every=10 --set checkpoint.every_steps=10 --set cluster.workers=2";

// The status table's row of `role`: "role host pid incarnation restarts state [last exit]".
std::string Row(const std::string& status, const std::string& role) {
  std::smatch m;
  const std::regex row("\\n  (" + role + " [^\\n]*)");
  return std::regex_search(status, m, row) ? m[1].str() : "";
}

TEST(StatusCommand, ADirectoryThatIsNotARunIsAClearError) {
  TempDir dir;
  CommandResult r = RunPsformer("status " + dir.path().string());
  EXPECT_TRUE(EndsSaying(
      r, 1,
      "psformer status: error: " + dir.path().string() + " is not a run directory (it has no config.pbtxt and logs/"));
  r = RunPsformer("status " + dir.File("missing"));
  EXPECT_TRUE(EndsSaying(r, 1, dir.File("missing") + " does not exist"));
  r = RunPsformer("status " + dir.Write("file", "x"));
  EXPECT_TRUE(EndsSaying(r, 1, dir.File("file") + " is not a directory"));
  r = RunPsformer("status");
  EXPECT_EQ(r.exit_status, 2) << r.output;
}

// A --watch interval that is not a positive number of seconds is named as such (a negative one
// used to come back as an unknown option "-1").
TEST(StatusCommand, AWatchIntervalThatIsNotPositiveIsNamed) {
  TempDir dir;
  testing::ExpectRefusedVariants("status " + dir.path().string() + " --watch ", "", 2,
                                 {{"-1", "--watch -1: must be a number of seconds > 0"},
                                  {"-0.5", "--watch -0.5: must be a number of seconds > 0"},
                                  {"0", "--watch 0: must be a number of seconds > 0"},
                                  {"inf", "--watch inf: must be a number of seconds > 0"}});
}

// A run whose config writes no checkpoints: it has its model, and nothing more is to come ("no
// checkpoint yet" said otherwise).
TEST(StatusCommand, AFinishedRunWithoutACheckpointNamesItsModel) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kJob +
                                " --set training.max_steps=5 --set checkpoint.every_steps=0 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  r = RunPsformer("status " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("  no checkpoint (checkpoint.every_steps and every_minutes are 0); the model: " + run +
                          "/model.bin\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("no checkpoint yet"), std::string::npos) << r.output;
  // Its log says which build trained it: the commit `psformer version` names.
  const CommandResult version = RunPsformer("version");
  const std::string build = version.output.substr(0, version.output.find('\n'));
  EXPECT_NE(testing::ReadTextFile(run + "/logs/supervisor.log").find("] " + build + "\n"), std::string::npos) << build;
}

TEST(StatusCommand, AFinishedRun) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kJob + " --set training.max_steps=20 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  r = RunPsformer("status " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("run " + run + " (copy): finished\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  step 20/20 (100%)  loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  a step: "), std::string::npos) << r.output;
  // The device's share of the step and the launching thread's CPU (on the CPU backend the device
  // is the compute the launching thread drives).
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\n  device busy [0-9]+% \\([0-9.]+ s a step\\), "
                                                     "launching thread's CPU [0-9.]+ s a step\n")))
      << r.output;
  EXPECT_NE(r.output.find("  valid (step 20): loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("newest checkpoint: step 20"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("has no complete checkpoint"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ETA"), std::string::npos) << r.output;
  for (const char* role : {"worker-0", "worker-1", "pserver-0"}) {
    EXPECT_TRUE(std::regex_search(Row(r.output, role), std::regex(" 0 +0 +finished"))) << role << "\n" << r.output;
  }
  // --watch on a job that is not running draws once and returns.
  r = RunPsformer("status " + run + " --watch 0.1");
  EXPECT_TRUE(EndsSaying(r, 0, "finished"));
  // A checkpoint with its manifest but a shard cut short (a full disk, a copy cut off) is not the
  // newest complete one: status names the one a resume would take, and the damaged one.
  const std::string shard = run + "/checkpoints/step-00000020/shard-0000-of-0001.bin";
  ASSERT_TRUE(std::filesystem::exists(shard));
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  r = RunPsformer("status " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("newest checkpoint: step 10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("damaged checkpoint, skipped: step 20: " + shard + " has "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the last step, 20, has no complete checkpoint; its weights are in " + run + "/model.bin"),
            std::string::npos)
      << r.output;

  // A flipped byte keeps the size: status alone takes the checkpoint for whole, --verify reads it
  // as a resume would and names the damage.
  const std::string shard10 = run + "/checkpoints/step-00000010/shard-0000-of-0001.bin";
  {
    std::fstream f(shard10, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char byte = static_cast<char>(f.get());
    f.seekp(100);
    f.put(static_cast<char>(byte ^ 0x20));
  }
  r = RunPsformer("status " + run);
  EXPECT_NE(r.output.find("newest checkpoint: step 10 ("), std::string::npos) << r.output;
  r = RunPsformer("status " + run + " --verify");
  // A check as a script uses it: the damage it found is exit status 1, after the whole report.
  EXPECT_TRUE(EndsSaying(r, 1, "psformer status: --verify found damage in " + run + " (listed above)"));
  EXPECT_EQ(r.output.find("newest checkpoint:"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("damaged checkpoint, skipped: step 10: " + shard10 + ": checksum differs from the manifest's"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("damaged checkpoint, skipped: step 20: "), std::string::npos) << r.output;
  // Put back, it verifies.
  {
    std::fstream f(shard10, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char byte = static_cast<char>(f.get());
    f.seekp(100);
    f.put(static_cast<char>(byte ^ 0x20));
  }
  r = RunPsformer("status " + run + " --verify");
  EXPECT_EQ(r.exit_status, 1) << r.output;  // step 20's shard is still cut short
  EXPECT_NE(r.output.find("newest checkpoint: step 10 (" + run +
                          "/checkpoints/step-00000010; every shard's CRC-32C "
                          "verified)"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(EndsSaying(RunPsformer("status " + run + " --verify --watch"), 2, "give --watch or --verify, not both"));
  EXPECT_NE(r.output.find("model: " + run + "/model.bin (read whole, CRC-32C verified)"), std::string::npos)
      << r.output;

  // A model.bin cut short: --verify reads it as translate would and says so.
  std::filesystem::resize_file(run + "/model.bin", 5000);
  r = RunPsformer("status " + run + " --verify");
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("damaged model: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(run + "/model.bin"), std::string::npos) << r.output;
}

// A run whose max_steps is not a logging step logs its last steps too, in a line that says how
// many it covers, and status reads it as the end of the run: a job and the local trainer.
TEST(StatusCommand, ARunEndingBetweenLoggingStepsLogsItsLastSteps) {
  TempDir dir;
  for (const char* how : {"", " --local"}) {
    SCOPED_TRACE(how);
    const std::string run = dir.File(*how ? "local" : "job");
    CommandResult r = RunPsformer(std::string("train ") + kJob + how + " --set training.max_steps=23 --run-dir " + run);
    ASSERT_EQ(r.exit_status, 0) << r.output;
    std::vector<std::string> train_lines;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"loss\"") != std::string::npos) train_lines.push_back(line);
    }
    ASSERT_EQ(train_lines.size(), 5u);
    EXPECT_EQ(train_lines[3].rfind("{\"step\": 20, \"loss\": ", 0), 0u) << train_lines[3];
    EXPECT_NE(train_lines[3].find(", \"steps\": 5}"), std::string::npos) << train_lines[3];
    EXPECT_EQ(train_lines[4].rfind("{\"step\": 23, \"loss\": ", 0), 0u) << train_lines[4];
    EXPECT_NE(train_lines[4].find(", \"steps\": 3}"), std::string::npos) << train_lines[4];
    r = RunPsformer("status " + run);
    EXPECT_NE(r.output.find("  step 23/23 (100%)  loss "), std::string::npos) << r.output;
  }
}

// A run that stopped before its first checkpoint has nothing to resume: status advises starting
// over, not a --resume that would be refused.
TEST(StatusCommand, AStoppedRunWithNothingToResumeAdvisesStartingOver) {
  TempDir dir;
  const std::string run = dir.File("run");
  std::filesystem::create_directories(run + "/logs");
  std::filesystem::copy_file(testing::SourceDir() + "/configs/copy.pbtxt", run + "/config.pbtxt");
  const CommandResult r = RunPsformer("status " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("nothing to resume (no complete checkpoint); start over with: psformer train --config " +
                          run + "/config.pbtxt --run-dir " + run + " --overwrite"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("--resume"), std::string::npos) << r.output;
}

// A run whose config.pbtxt train would refuse (emptied, or edited into a model that cannot be)
// is named as such, not read as the defaults it leaves ("step 60/100000").
TEST(StatusCommand, AConfigTrainWouldRefuseIsAnError) {
  TempDir dir;
  const std::string run = dir.File("run");
  std::filesystem::create_directories(run + "/logs");
  std::ofstream(run + "/config.pbtxt") << "";
  CommandResult r = RunPsformer("status " + run);
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("psformer status: error: config file " + run + "/config.pbtxt sets nothing"),
            std::string::npos)
      << r.output;
  std::ofstream(run + "/config.pbtxt") << "model { d_model: 64 heads: 5 }\n";
  r = RunPsformer("status " + run);
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("invalid config " + run + "/config.pbtxt"), std::string::npos) << r.output;
}

// A --local run's trainer_state.bin cut short is named as damaged, and status advises no
// --resume that would be refused with it.
TEST(StatusCommand, ADamagedTrainerStateIsNamedAndNotAdvisedToResumeFrom) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(
      "train --local --config configs/copy.pbtxt --set training.max_steps=10 --set training.valid_every=0 "
      "--set training.stop_at_valid_accuracy=0 --run-dir " +
      run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  std::filesystem::remove(run + "/model.bin");
  r = RunPsformer("status " + run);
  EXPECT_NE(r.output.find("  continue with: psformer train --local"), std::string::npos) << r.output;
  r = RunPsformer("status " + run + " --verify");
  EXPECT_EQ(r.exit_status, 0) << r.output;  // nothing damaged
  EXPECT_NE(r.output.find("  trainer state: " + run + "/trainer_state.bin (CRC-32C verified)\n"), std::string::npos)
      << r.output;
  // A flipped byte near its end (in Adam's moments) is seen by --verify alone.
  const std::string state = run + "/trainer_state.bin";
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-8, std::ios::end);
    const char byte = static_cast<char>(f.get());
    f.seekp(-8, std::ios::end);
    f.put(static_cast<char>(byte ^ 0x01));
  }
  r = RunPsformer("status " + run);
  EXPECT_NE(r.output.find("  continue with: psformer train --local"), std::string::npos) << r.output;
  r = RunPsformer("status " + run + " --verify");
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("  damaged trainer state: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  nothing to resume (trainer_state.bin is damaged)"), std::string::npos) << r.output;
  std::filesystem::resize_file(run + "/trainer_state.bin", 1000);
  r = RunPsformer("status " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("  damaged trainer state: trainer state " + run + "/trainer_state.bin: truncated or padded"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  nothing to resume (trainer_state.bin is damaged); start over with: "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("--resume"), std::string::npos) << r.output;
}

TEST(StatusCommand, LongAndMalformedLinesAreNamedNotFatal) {
  // ~30 KB lines once overflowed the stack of the regex readers (signal 11); a --resume of such a
  // run crash-looped worker 0, which reads metrics.jsonl at start.
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(std::string("train ") + kJob + " --set training.max_steps=10 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::string long_text(30000, '(');
  std::ofstream(run + "/metrics.jsonl", std::ios::app) << "{\"step\": 10, \"note\": \"" << long_text << "\"}\n"
                                                       << "{\"step\": 11, \"loss\": " << long_text << "\n";
  std::ofstream(run + "/logs/supervisor.log", std::ios::app) << "I x] worker-0: " << long_text << "\n"
                                                             << "] worker-" << std::string(30000, '9') << "\n";
  r = RunPsformer("status " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("  step 10/10 (100%)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unreadable: " + run + "/metrics.jsonl:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": column 22: expected a number, a string, true, false or null; line skipped"),
            std::string::npos)
      << r.output;
  r = RunPsformer("plot " + run + " --out " + dir.File("p.png"));
  EXPECT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("psformer plot: warning: " + run + "/metrics.jsonl:"), std::string::npos) << r.output;
  r = RunPsformer(std::string("train ") + kJob + " --set training.max_steps=15 --resume --run-dir " + run);
  EXPECT_EQ(r.exit_status, 0) << r.output;
}

// Under mpirun each rank's log says its host. Status sees only this machine's processes: a role
// on another host that its log says runs is "not seen", not "gone", and a job with no role here
// is not called stopped (nor is a --resume advised, which would start a second job beside it).
// Here an mpirun job of this machine, its logs then edited as those of a job that still runs,
// with rank 1 on another host.
TEST(StatusCommand, UnderMpirunRolesOnOtherHostsAreNotSeenNotGone) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult job = testing::RunPsformerUnderMpirun(
      3, std::string("train ") + kJob + " --set training.max_steps=10 --set cluster.servers=1 --run-dir " + run);
  ASSERT_EQ(job.exit_status, 0) << job.output;
  std::string here = testing::RunShell("hostname").output;
  here.erase(here.find_last_not_of('\n') + 1);
  CommandResult r = RunPsformer("status " + run);
  EXPECT_TRUE(
      std::regex_search(Row(r.output, "worker-1"), std::regex("^worker-1 +" + here + " +[0-9]+ +0 +0 +finished")))
      << r.output;
  // As a job that still runs: no "finished" line, no model.bin, rank 1 on node-b.
  for (int rank : {0, 1, 2}) {
    const std::string log = run + "/logs/supervisor-" + std::to_string(rank) + ".log";
    testing::RunShell("sed -i '/: finished$/d" + std::string(rank == 1 ? "; s/ on host [^;]*;/ on host node-b;/" : "") +
                      "' " + log);
  }
  std::filesystem::remove(run + "/model.bin");
  r = RunPsformer("status " + run);
  EXPECT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "(copy): not running on this machine; on other hosts its logs say it runs"))
      << r.output;
  EXPECT_TRUE(std::regex_search(Row(r.output, "worker-1"), std::regex("^worker-1 +node-b +[0-9]+ +0 +0 +not seen")))
      << r.output;
  EXPECT_TRUE(std::regex_search(Row(r.output, "worker-0"), std::regex("^worker-0 +" + here + " +[0-9]+ +0 +0 +gone")))
      << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "(not seen: on another host")) << r.output;
  EXPECT_FALSE(testing::HasText(r.output, "continue with")) << r.output;
}

TEST(StatusCommand, ARunningJobAndItsRestartedWorker) {
  TempDir dir;
  const std::string run = dir.File("run");
  BackgroundJob job(std::string("train ") + kJob + " --set training.max_steps=100000 --set fault.kill=worker:1@15 " +
                        "--run-dir " + run,
                    dir.File("train.out"));
  // Poll as a person at another terminal would, a bounded number of times, until the restarted
  // worker is seen running again.
  std::string seen;
  bool restarted = false;
  for (int i = 0; i < 300 && !restarted && !job.Exited(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const CommandResult r = RunPsformer("status " + run);
    seen = r.output;
    restarted = r.exit_status == 0 &&
                std::regex_search(Row(seen, "worker-1"), std::regex(" 1 +1 +running +killed by signal 9"));
  }
  ASSERT_TRUE(restarted) << seen << "\n" << job.Output();
  EXPECT_NE(seen.find("(copy): running\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("/100000 ("), std::string::npos) << seen;
  EXPECT_NE(seen.find("  ETA "), std::string::npos) << seen;
  EXPECT_TRUE(std::regex_search(Row(seen, "worker-0"), std::regex(" 0 +0 +running"))) << seen;
  EXPECT_NE(seen.find("last warning or error: "), std::string::npos) << seen;
  EXPECT_NE(seen.find("worker-1 killed by signal 9"), std::string::npos) << seen;

  job.SignalGroup(SIGINT);
  ASSERT_EQ(job.Wait(std::chrono::seconds(150)), 130) << job.Output();
  const CommandResult after = RunPsformer("status " + run);
  EXPECT_TRUE(EndsSaying(after, 0, "(copy): not running (stopped or died)"));
  EXPECT_NE(after.output.find("continue with: psformer train --config " + run + "/config.pbtxt --run-dir " + run +
                              " --resume"),
            std::string::npos)
      << after.output;
}

}  // namespace
}  // namespace psformer
