// Checkpoint failures are loud: each one is reported on the console by the supervisor, the job
// tries the next, a run that ends without the checkpoints it asked for is not a plain success,
// and checkpoint.max_failures_in_a_row failures in a row stop the job, naming the last good one.
//
// A checkpoint is made to fail the way a full or broken disk would: a file stands where its
// directory has to be created.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace psformer::testing {
namespace {

const char* kJob =
    "train --config configs/copy.pbtxt --set training.valid_every=0 --set training.stop_at_valid_accuracy=0 "
    "--set logging.every_steps=5 --set checkpoint.every_steps=10 --set checkpoint.keep_last=0";

// A run directory in which the checkpoints of `steps` cannot be written.
std::string RunDirBlocking(const TempDir& dir, std::initializer_list<int> steps) {
  const std::filesystem::path run = dir.File("run");
  std::filesystem::create_directories(run / "checkpoints");
  for (int step : steps) {
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08d", step);
    std::ofstream(run / "checkpoints" / name) << "in the way\n";
  }
  return run.string();
}

TEST(CheckpointFailure, IsReportedOnTheConsoleAndTheRunIsNotAPlainSuccess) {
  TempDir dir;
  const std::string run = RunDirBlocking(dir, {20});
  const CommandResult r = RunPsformer(std::string(kJob) + " --set training.max_steps=40 --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "warning: pserver-0: shard 0 could not write its checkpoint of step 20 (1 in a row"));
  EXPECT_TRUE(HasText(r.output, "training finished, but 1 checkpoint(s) could not be written")) << r.output;
  EXPECT_TRUE(HasText(r.output, "last good checkpoint: " + run + "/checkpoints/step-00000040")) << r.output;
  EXPECT_FALSE(HasText(r.output, "trained copy")) << r.output;
  // The job went on after the failure: the next checkpoints were written, and so was the model.
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step-00000030/manifest.pbtxt"));
  EXPECT_TRUE(std::filesystem::exists(run + "/model.bin"));
}

// A job checkpoints its last step when it ends between two periodic checkpoints; that one's
// failure is reported as any other, after model.bin is written.
TEST(CheckpointFailure, OfTheLastStepIsReportedAndTheModelIsWritten) {
  TempDir dir;
  const std::string run = RunDirBlocking(dir, {23});
  const CommandResult r = RunPsformer(std::string(kJob) + " --set training.max_steps=23 --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1,
                         "training finished, but 1 checkpoint(s) could not be written (see above); last good "
                         "checkpoint: " +
                             run + "/checkpoints/step-00000020"));
  EXPECT_TRUE(HasText(r.output, "shard 0 could not write its checkpoint of step 23 (1 in a row")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/model.bin"));
  // psformer status says the last step has none, and where its weights are.
  const CommandResult status = RunPsformer("status " + run);
  EXPECT_TRUE(HasText(status.output, "newest checkpoint: step 20 (")) << status.output;
  EXPECT_TRUE(
      HasText(status.output, "the last step, 23, has no complete checkpoint; its weights are in " + run + "/model.bin"))
      << status.output;
}

// Through psformer launch, a job that trained to its end and then failed (here: its last step's
// checkpoint) is not restarted: no restart mends that, and each would train the steps since the
// newest checkpoint again.
TEST(CheckpointFailure, AfterTheJobTrainedToItsEndLaunchDoesNotRestartIt) {
  TempDir dir;
  const std::string run = RunDirBlocking(dir, {23});
  const CommandResult r = RunPsformer(LaunchOnThisHost(
      dir, 2,
      std::string(kJob).substr(std::string("train ").size()) + " --set training.max_steps=23 --run-dir " + run));
  EXPECT_TRUE(EndsSaying(r, 1,
                         "the job trained to its end and wrote " + run +
                             "/model.bin, but ended with an error (see above); not restarting"));
  EXPECT_TRUE(HasText(r.output, "could not write its checkpoint of step 23")) << r.output;
  EXPECT_FALSE(HasText(r.output, "restart 1 of")) << r.output;
}

TEST(CheckpointFailure, TooManyInARowStopTheJobNamingTheLastGoodCheckpoint) {
  TempDir dir;
  const std::string run = RunDirBlocking(dir, {20, 30, 40});
  const CommandResult r = RunPsformer(std::string(kJob) + " --set training.max_steps=100 --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "3 checkpoint(s) in a row could not be written"));
  EXPECT_TRUE(HasText(r.output, "last good checkpoint: " + run + "/checkpoints/step-00000010")) << r.output;
  EXPECT_TRUE(HasText(r.output, "not restarted")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/model.bin"));
  // Stopped at the third failure, not trained on to the end, and never restarted.
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/step-00000050"));
  EXPECT_FALSE(HasText(ReadTextFile(run + "/logs/supervisor.log"), "restarting in"));
}

TEST(CheckpointFailure, TheLimitIsASetting) {
  TempDir dir;
  const std::string run = RunDirBlocking(dir, {10});
  const CommandResult r = RunPsformer(std::string(kJob) +
                                      " --set training.max_steps=30 --set checkpoint.max_failures_in_a_row=1 "
                                      "--run-dir " +
                                      run);
  EXPECT_TRUE(EndsSaying(r, 1, "1 checkpoint(s) in a row could not be written"));
  EXPECT_TRUE(HasText(r.output, "last good checkpoint: none")) << r.output;
}

// A model file that cannot be written (a full disk, here a directory in its place) ends the job
// once, saying why and how to continue; it used to restart worker 0 five times, failing alike.
TEST(ModelWriteFailure, EndsTheJobOnceInsteadOfRestartingTheWorker) {
  TempDir dir;
  const std::string run = dir.File("run");
  // Put in the way once the job has started (a run directory holding model.bin is refused).
  const CommandResult r =
      RunShell("cd " + SourceDir() + " && { " + PsformerBinary() + " " + kJob +
               " --set training.max_steps=20 --run-dir " + run + " & job=$!; until [ -e " + run +
               "/config.pbtxt ]; do sleep 0.05; done; mkdir -p " + run + "/model.bin/in-the-way; wait $job; }");
  EXPECT_TRUE(EndsSaying(r, 1, "model.bin")) << r.output;
  EXPECT_TRUE(HasText(r.output, "a restart would fail the same way")) << r.output;
  EXPECT_TRUE(HasText(r.output, "not restarted")) << r.output;
  EXPECT_TRUE(HasText(r.output, "continue with --resume (from the checkpoint of step ")) << r.output;
  EXPECT_FALSE(HasText(ReadTextFile(run + "/logs/supervisor.log"), "restarting in")) << r.output;

  // Without any checkpoint a resume would have nothing to continue from: the weights end with the
  // job, and it says so instead of advising --resume.
  const std::string bare = dir.File("bare");
  const CommandResult none = RunShell(
      "cd " + SourceDir() + " && { " + PsformerBinary() + " " + kJob +
      " --set training.max_steps=20 --set checkpoint.every_steps=0 --run-dir " + bare + " & job=$!; until [ -e " +
      bare + "/config.pbtxt ]; do sleep 0.05; done; mkdir -p " + bare + "/model.bin/in-the-way; wait $job; }");
  EXPECT_TRUE(EndsSaying(none, 1, "model.bin")) << none.output;
  EXPECT_TRUE(HasText(none.output, "start over: no checkpoint was written")) << none.output;
  EXPECT_FALSE(HasText(none.output, "continue with --resume")) << none.output;
}

// A run directory that fills while the job logs (a small tmpfs in a mount namespace of the test's
// own): the job ends once, naming metrics.jsonl and the disk, not as "a configuration error" after
// two restarts; and metrics.jsonl ends with a whole line, not one cut short.
TEST(MetricsWriteFailure, AFullDiskEndsTheJobOnceNamingTheFile) {
  if (RunShell("unshare -m true").exit_status != 0) GTEST_SKIP() << "no mount namespace can be made here";
  TempDir dir;
  const std::string fs = dir.File("fs");
  const CommandResult r =
      RunShell("cd " + SourceDir() + " && mkdir -p " + fs + " && unshare -m sh -c 'mount -t tmpfs -o size=120k tmpfs " +
               fs + " && { " + PsformerBinary() + " " + kJob +
               " --set logging.tensorboard=false --set checkpoint.every_steps=0 --set logging.every_steps=1 "
               "--set training.max_steps=100000 --run-dir " +
               fs + "/run; echo exit=$?; tail -c 1 " + fs + "/run/metrics.jsonl | od -c | head -1; }'");
  EXPECT_TRUE(HasText(r.output, "cannot write to " + fs +
                                    "/run/metrics.jsonl: No space left on device: a restart "
                                    "would fail the same way"))
      << r.output;
  EXPECT_TRUE(HasText(r.output, "exit=1")) << r.output;
  EXPECT_FALSE(HasText(r.output, "configuration error")) << r.output;
  EXPECT_TRUE(HasText(r.output, "\\n")) << "metrics.jsonl ends mid-line:\n" << r.output;
}

}  // namespace
}  // namespace psformer::testing
