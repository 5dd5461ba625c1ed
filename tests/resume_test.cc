// Stopping and continuing a whole job (label `fault`): Ctrl-C in single-node mode stops it in
// order and leaves a complete checkpoint; a job killed outright (SIGKILL to its process group)
// continues from its last periodic checkpoint. Either way `--resume` ends with the weights of
// an undisturbed run, bitwise (docs/determinism.md, docs/failure-model.md). A worker asked to
// stop before any server answered it exits at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <regex>
#include <thread>

#include "tests/background_job.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::BackgroundJob;
using testing::CommandResult;
using testing::ModelDigest;
using testing::NewestCompleteCheckpoint;
using testing::RunPsformer;
using testing::TempDir;

// Two workers and two shards, so that a stop has to leave every shard at the same step. Early
// stopping and validation are off: the run ends at max_steps, whatever the accuracy.
const char* kJob =
    "--config configs/copy.pbtxt --set training.max_steps=200 --set training.valid_every=0 "
    "--set training.stop_at_valid_accuracy=0 --set logging.every_steps=5 --set cluster.workers=2 "
    "--set cluster.servers=2";

// The jobs that get stopped or killed hold half their messages 50 ms: on a quiet machine the 200
// steps take about 6 s, too little margin past step 20 for a signal through mpirun. No weight
// changes (BSP sums in worker order, whatever the timing); the continued runs go without delays.
const char* kSlowSteps = " --set fault.delay_fraction=0.5 --set fault.delay_ms=50";
const char* kNoDelays = " --set fault.delay_fraction=0";
// Steps of 2 to 4 s: longer than mpirun waits after it passed a Ctrl-C or SIGTERM on to its ranks
// before it kills them (a second, odls_base_sigkill_timeout), as a large model's step and
// checkpoint are.
const char* kStepsLongerThanMpirunsGrace = " --set fault.delay_fraction=0.5 --set fault.delay_ms=1500";

std::string UndisturbedDigest(const TempDir& dir) {
  const std::string run = dir.File("undisturbed");
  CommandResult r = RunPsformer(std::string("train ") + kJob + " --set checkpoint.every_steps=0 --run-dir " + run);
  EXPECT_EQ(r.exit_status, 0) << r.output;
  return ModelDigest(run + "/model.bin");
}

std::string CheckpointManifest(const std::string& run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return run + "/checkpoints/" + name + "/manifest.pbtxt";
}

// The step a worker's log says it stopped at, or -1.
int64_t StoppedAt(const std::string& worker_log) {
  static const std::regex kStopped("stopped at step ([0-9]+)");
  const std::string all = BackgroundJob::ReadAll(worker_log);
  std::smatch m;
  return std::regex_search(all, m, kStopped) ? std::stoll(m[1].str()) : -1;
}

// The step every shard applied when both workers stopped: the smaller of their last steps, which
// differ by at most one (BSP lets a worker push step t + 1 only once step t is applied).
int64_t StoppedCut(const std::string& run) {
  const int64_t a = StoppedAt(run + "/logs/worker-0.log"), b = StoppedAt(run + "/logs/worker-1.log");
  EXPECT_LE(std::abs(a - b), 1) << "worker 0 stopped at " << a << ", worker 1 at " << b;
  return std::min(a, b);
}

// The advice a job in `run` stopped by a signal ends with: how to continue it, after `launcher` (""
// or "mpirun ... ", as the advice shows what started the job); `how` it stopped: "interrupted"
// (Ctrl-C, SIGTERM) or "hung up" (SIGHUP).
std::string ContinueAdvice(const std::string& run, const std::string& launcher,
                           const std::string& how = "interrupted") {
  return how + "; continue with: " + launcher + "psformer train --config " + run + "/config.pbtxt --run-dir " + run +
         " --resume";
}

// Checks that a resumed run of the job in `run` ended well, went on from the checkpoint of `step`
// (as the server of shard `shard` logs), and trained the weights of the `undisturbed` run.
void ExpectResumedToTheSameWeights(const CommandResult& resumed, const std::string& run, int shard, int64_t step,
                                   const std::string& undisturbed) {
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_NE(BackgroundJob::ReadAll(run + "/logs/pserver-" + std::to_string(shard) + ".log")
                .find("resumes from the checkpoint of step " + std::to_string(step)),
            std::string::npos);
  EXPECT_FALSE(undisturbed.empty());
  EXPECT_EQ(ModelDigest(run + "/model.bin"), undisturbed);
}

// Runs the slow job in `run` in the background (through `launcher`, as BackgroundJob does) and sends
// `signal` to its process group once it logged step `step`; its exit status and output.
CommandResult SignalAtStep(const std::string& run, int64_t step, int signal, const std::string& launcher = "") {
  BackgroundJob job(std::string("train ") + kJob + kSlowSteps + " --set checkpoint.every_steps=0 --run-dir " + run,
                    run + ".out", launcher);
  CommandResult result;
  if (!testing::WaitForStep(&job, run, step, std::chrono::seconds(120))) {
    ADD_FAILURE() << "no step " << step << " logged:\n" << job.Output();
    return result;
  }
  job.SignalGroup(signal);
  result.exit_status = job.Wait(std::chrono::seconds(150));
  result.output = job.Output();
  return result;
}

TEST(Resume, CtrlCStopsInOrderAndLeavesACheckpointThatResumesToTheSameWeights) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  const std::string run = dir.File("interrupted");
  // Ctrl-C: the terminal signals the foreground process group.
  const CommandResult interrupted = SignalAtStep(run, 20, SIGINT);
  ASSERT_EQ(interrupted.exit_status, 130) << interrupted.output;
  EXPECT_TRUE(testing::HasText(interrupted.output, ContinueAdvice(run, ""))) << interrupted.output;
  // Both workers stopped after the same complete step, and the servers' checkpoint of it is
  // complete (its manifest is written once every shard is on disk).
  // The workers get the signal at slightly different times: one may finish one step more (its
  // push is then buffered, not applied), so the complete step is the smaller of the two.
  const int64_t stopped = StoppedCut(run);
  ASSERT_GE(stopped, 20) << BackgroundJob::ReadAll(run + "/logs/worker-0.log");
  EXPECT_LT(stopped, 200);
  EXPECT_TRUE(std::filesystem::exists(CheckpointManifest(run, stopped))) << CheckpointManifest(run, stopped);
  EXPECT_FALSE(std::filesystem::exists(run + "/model.bin"));
  // The coordinator's last train line holds the steps through the last one whose pull came back
  // (the one before it stopped at), not the last logging step's.
  const int64_t coordinator_stopped = StoppedAt(run + "/logs/worker-0.log");
  const std::vector<double> logged = testing::MetricValues(run + "/metrics.jsonl", "step");
  ASSERT_FALSE(logged.empty());
  EXPECT_EQ(logged.back(), coordinator_stopped - 1);

  ExpectResumedToTheSameWeights(
      RunPsformer("train --config " + run + "/config.pbtxt --run-dir " + run + " --resume" + kNoDelays), run, 1,
      stopped, undisturbed);
  // Every step is in one train line but the coordinator's stopped step where the resume took it up
  // again (its loss over both workers' batches comes with a pull the stop does not make).
  const std::vector<double> steps = testing::MetricValues(run + "/metrics.jsonl", "steps");
  double covered = 0;
  for (double n : steps) covered += n;
  EXPECT_EQ(covered, 200 - (coordinator_stopped == stopped ? 1 : 0));
}

// The pids the supervisor of the job in `run` started its role processes with, by role name
// ("worker-1"), first incarnations only.
std::map<std::string, pid_t> RolePids(const std::string& run) {
  static const std::regex kStarted("\\] ([a-z]+-[0-9]+): started pid ([0-9]+) \\(incarnation 0\\)");
  const std::string log = BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  std::map<std::string, pid_t> pids;
  for (std::sregex_iterator it(log.begin(), log.end(), kStarted), end; it != end; ++it) {
    pids[(*it)[1].str()] = static_cast<pid_t>(std::stoll((*it)[2].str()));
  }
  return pids;
}

// Runs the slow job in `run`, and once it logged step 20 sends SIGTERM to the processes `whom`
// picks (of the supervisor's pid and its roles'); then checks the job stopped in order as on
// Ctrl-C (exit 130, a complete checkpoint of the step both workers stopped after, no role that had
// to be killed) and that its resume ends with the `undisturbed` weights.
void ExpectASignalOfAnotherSenderToStopTheJobInOrder(
    const TempDir& dir, const std::string& undisturbed,
    const std::function<std::vector<pid_t>(pid_t supervisor, const std::map<std::string, pid_t>& roles)>& whom,
    const std::vector<std::string>& said) {
  const std::string run = dir.File("run");
  CommandResult stopped;
  {
    BackgroundJob job(std::string("train ") + kJob + kSlowSteps + " --set checkpoint.every_steps=0 --run-dir " + run,
                      run + ".out");
    ASSERT_TRUE(testing::WaitForStep(&job, run, 20, std::chrono::seconds(120))) << job.Output();
    const std::map<std::string, pid_t> roles = RolePids(run);
    ASSERT_EQ(roles.size(), 4u) << BackgroundJob::ReadAll(run + "/logs/supervisor.log");
    for (const pid_t pid : whom(job.pid(), roles)) ASSERT_EQ(kill(pid, SIGTERM), 0) << pid;
    stopped.exit_status = job.Wait(std::chrono::seconds(150));
    stopped.output = job.Output();
  }
  ASSERT_EQ(stopped.exit_status, 130) << stopped.output;
  for (const std::string& text : said)
    EXPECT_TRUE(testing::HasText(stopped.output, text)) << text << "\n" << stopped.output;
  EXPECT_FALSE(testing::HasText(stopped.output, "did not stop in time")) << stopped.output;
  EXPECT_FALSE(testing::HasText(stopped.output, "restarting")) << stopped.output;
  EXPECT_TRUE(testing::HasText(stopped.output, ContinueAdvice(run, ""))) << stopped.output;
  const int64_t cut = StoppedCut(run);
  ASSERT_GE(cut, 20);
  EXPECT_TRUE(std::filesystem::exists(CheckpointManifest(run, cut))) << CheckpointManifest(run, cut);
  ExpectResumedToTheSameWeights(
      RunPsformer("train --config " + run + "/config.pbtxt --run-dir " + run + " --resume" + kNoDelays), run, 1, cut,
      undisturbed);
}

// Ctrl-Z (SIGTSTP to the terminal's foreground group, where only the supervisor is) pauses the
// whole job: every role process stops, no step is logged while it is paused, and a pause longer
// than the heartbeat timeout is no hang. `fg` (SIGCONT) continues it to the undisturbed weights,
// with no role restarted. (Once Ctrl-Z stopped only the supervisor, and training went on.)
TEST(Resume, CtrlZPausesTheWholeJobAndFgContinuesItToTheSameWeights) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  const std::string run = dir.File("paused");
  BackgroundJob job(std::string("train ") + kJob + kSlowSteps +
                        " --set checkpoint.every_steps=0 --set cluster.heartbeat_timeout_ms=1000 --run-dir " + run,
                    run + ".out");
  ASSERT_TRUE(testing::WaitForStep(&job, run, 20, std::chrono::seconds(120))) << job.Output();
  const std::vector<pid_t> roles = testing::StartedPids(run + "/logs/supervisor.log");
  ASSERT_EQ(roles.size(), 4u) << BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  auto stopped = [](pid_t pid) { return testing::StatFields(pid).substr(0, 1) == "T"; };
  job.SignalGroup(SIGTSTP);
  const bool all_stopped = testing::WaitUntil(&job, std::chrono::seconds(20), [&] {
    return stopped(job.pid()) && std::all_of(roles.begin(), roles.end(), stopped);
  });
  ASSERT_TRUE(all_stopped) << job.Output();
  const int64_t paused_at = testing::LastLoggedStep(run);
  // Three heartbeat timeouts: a supervisor that counted the pause as silence would kill its roles.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(testing::LastLoggedStep(run), paused_at);
  EXPECT_TRUE(stopped(job.pid()) && std::all_of(roles.begin(), roles.end(), stopped));
  job.SignalGroup(SIGCONT);
  ASSERT_EQ(job.Wait(std::chrono::seconds(150)), 0) << job.Output();
  const std::string output = job.Output();
  EXPECT_TRUE(testing::HasText(output, "paused (Ctrl-Z): every role process of the job is stopped")) << output;
  EXPECT_TRUE(testing::HasText(output, "continued after ")) << output;
  const std::string log = BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  EXPECT_FALSE(testing::HasText(log, "no heartbeat")) << log;
  EXPECT_EQ(testing::StartedPids(run + "/logs/supervisor.log").size(), 4u) << log;  // nothing restarted
  EXPECT_EQ(ModelDigest(run + "/model.bin"), undisturbed);
}

// A SIGTERM to every process of the job at once, as `pkill psformer`, a batch system's cancel or
// systemd's stop sends it: the roles leave the stop to their supervisor, which stops them in
// order. (Each role once acted on it by itself: servers stopped while their workers' step was
// half pushed, wrote no checkpoint or were restarted and rolled back, and workers waited 60 s
// for servers already gone.)
TEST(Resume, ASigtermToEveryProcessOfTheJobStopsItInOrderAndItResumesToTheSameWeights) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  ExpectASignalOfAnotherSenderToStopTheJobInOrder(dir, undisturbed,
                                                  [](pid_t supervisor, const std::map<std::string, pid_t>& roles) {
                                                    std::vector<pid_t> all = {supervisor};
                                                    for (const auto& [name, pid] : roles) all.push_back(pid);
                                                    return all;
                                                  },
                                                  {"psformer train: interrupted; workers finish their step"});
}

// A SIGTERM to one worker alone (not through its supervisor): the job cannot go on without it, so
// the whole job stops in order, as on Ctrl-C, and says why. (A worker once took it as its own
// stop, and the job waited for it for ever; later it was restarted as if it had died.)
TEST(Resume, ASigtermToOneWorkerAloneStopsTheWholeJobInOrderAndItResumesToTheSameWeights) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  ExpectASignalOfAnotherSenderToStopTheJobInOrder(
      dir, undisturbed,
      [](pid_t, const std::map<std::string, pid_t>& roles) { return std::vector<pid_t>{roles.at("worker-1")}; },
      {"worker-1 got signal 15 (Terminated) from pid " + std::to_string(getpid()) +
       ", not from its supervisor: the whole job stops in order, as on Ctrl-C"});
}

// The local trainer (--local) stops after its step on Ctrl-C too: exit 130, its state written (no
// model.bin), the advice to continue with --local, which `status` repeats; resumed without
// --local it is refused with that advice, and with it trains the weights of an undisturbed run.
// (It ended on the signal's default action, its work since the last state lost.)
TEST(Resume, CtrlCStopsTheLocalTrainerWhichResumesToTheSameWeights) {
  TempDir dir;
  const std::string local =
      "--local --config configs/copy.pbtxt --set training.valid_every=0 --set training.stop_at_valid_accuracy=0 "
      "--set logging.every_steps=5 --set checkpoint.every_steps=0";
  const std::string undisturbed = dir.File("undisturbed");
  CommandResult r = RunPsformer("train " + local + " --set training.max_steps=300 --run-dir " + undisturbed);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::string run = dir.File("interrupted");
  {
    // Steps enough that the signal comes long before the end; the run continues to 300.
    BackgroundJob job("train " + local + " --set training.max_steps=100000 --run-dir " + run, run + ".out");
    ASSERT_TRUE(testing::WaitForStep(&job, run, 20, std::chrono::seconds(120))) << job.Output();
    job.SignalGroup(SIGINT);
    r.exit_status = job.Wait(std::chrono::seconds(60));
    r.output = job.Output();
  }
  ASSERT_EQ(r.exit_status, 130) << r.output;
  const std::string advice = "psformer train --local --config " + run + "/config.pbtxt --run-dir " + run + " --resume";
  EXPECT_TRUE(testing::HasText(r.output, "interrupted (Interrupt); its state is in " + run +
                                             "/trainer_state.bin; "
                                             "continue with: " +
                                             advice))
      << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/trainer_state.bin"));
  EXPECT_FALSE(std::filesystem::exists(run + "/model.bin"));
  const int64_t stopped = testing::LastLoggedStep(run);  // the stop logs its last steps
  ASSERT_GE(stopped, 20);
  ASSERT_LT(stopped, 300);
  EXPECT_TRUE(testing::HasText(RunPsformer("status " + run).output, "continue with: " + advice));

  EXPECT_TRUE(testing::EndsSaying(RunPsformer("train --config " + run + "/config.pbtxt --run-dir " + run + " --resume"),
                                  1,
                                  "was trained with --local (it holds trainer_state.bin and no checkpoints/): "
                                  "continue it with --local"));
  // A step count the state has passed is refused, as a job's resume refuses it, and the run's
  // config stays as it was.
  const std::string config_before = testing::ReadTextFile(run + "/config.pbtxt");
  EXPECT_TRUE(testing::EndsSaying(RunPsformer("train --local --config " + run + "/config.pbtxt --run-dir " + run +
                                              " --resume --set training.max_steps=10"),
                                  1, ", past training.max_steps (10): continue with --set training.max_steps=N"));
  EXPECT_EQ(testing::ReadTextFile(run + "/config.pbtxt"), config_before);
  r = RunPsformer("train --local --config " + run + "/config.pbtxt --run-dir " + run +
                  " --resume --set training.max_steps=300");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(ModelDigest(run + "/model.bin"), ModelDigest(undisturbed + "/model.bin"));
}

// The job's shared-memory segments still in /dev/shm, by the prefix its supervisor logged.
std::vector<std::string> JobSegmentsLeft(const std::string& run) {
  static const std::regex kPrefix("shared memory: /dev/shm/([^*]+)\\*");
  const std::string log = BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  std::smatch m;
  std::vector<std::string> left;
  if (!std::regex_search(log, m, kPrefix)) return {"(no prefix logged)"};
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(m[1].str(), 0) == 0) left.push_back(entry.path().string());
  }
  return left;
}

TEST(Resume, AHangUpStopsInOrderLikeCtrlCAndExits129) {
  TempDir dir;
  const std::string run = dir.File("hungup");
  // The terminal closed: the shell passes SIGHUP to its jobs.
  const CommandResult hungup = SignalAtStep(run, 10, SIGHUP);
  ASSERT_EQ(hungup.exit_status, 129) << hungup.output;
  EXPECT_NE(hungup.output.find("hung up (SIGHUP: the terminal closed)"), std::string::npos) << hungup.output;
  EXPECT_TRUE(testing::HasText(hungup.output, ContinueAdvice(run, "", "hung up"))) << hungup.output;
  const int64_t stopped = StoppedCut(run);
  ASSERT_GE(stopped, 10) << BackgroundJob::ReadAll(run + "/logs/worker-0.log");
  EXPECT_TRUE(std::filesystem::exists(CheckpointManifest(run, stopped))) << CheckpointManifest(run, stopped);
  EXPECT_EQ(JobSegmentsLeft(run), std::vector<std::string>{});
}

// `psformer train ... 2>&1 | tee LOG`, then Ctrl-C or a closed terminal: the signal ends tee as
// well, so the supervisor's console is gone when it says what it does. Here the console's reader
// (head -c 1) leaves after the job's first byte, and the signal comes later: the job stops in order
// all the same, with its exit status, its stop checkpoint, its advice in its log and nothing of it
// in /dev/shm. (Killed by SIGPIPE, it left none of these.)
void ExpectAStopInOrderWithTheConsoleGone(int signal, int exit_status) {
  TempDir dir;
  const std::string run = dir.File("piped");
  BackgroundJob job(std::string("train ") + kJob + kSlowSteps + " --set checkpoint.every_steps=0 --run-dir " + run,
                    run + ".out", BackgroundJob::ConsoleThatCloses{1});
  ASSERT_TRUE(testing::WaitForStep(&job, run, 10, std::chrono::seconds(120)))
      << "the job did not reach step 10; supervisor log:\n"
      << BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  job.SignalGroup(signal);
  ASSERT_EQ(job.Wait(std::chrono::seconds(150)), exit_status) << BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  const int64_t stopped = StoppedCut(run);
  ASSERT_GE(stopped, 10) << BackgroundJob::ReadAll(run + "/logs/worker-0.log");
  EXPECT_TRUE(std::filesystem::exists(CheckpointManifest(run, stopped))) << CheckpointManifest(run, stopped);
  EXPECT_TRUE(testing::HasText(BackgroundJob::ReadAll(run + "/logs/supervisor.log"),
                               ContinueAdvice(run, "", signal == SIGHUP ? "hung up" : "interrupted")))
      << BackgroundJob::ReadAll(run + "/logs/supervisor.log");
  EXPECT_EQ(JobSegmentsLeft(run), std::vector<std::string>{});
}

TEST(Resume, CtrlCWithTheConsoleGoneStopsInOrderAndExits130) { ExpectAStopInOrderWithTheConsoleGone(SIGINT, 130); }

TEST(Resume, AHangUpWithTheConsoleGoneStopsInOrderAndExits129) { ExpectAStopInOrderWithTheConsoleGone(SIGHUP, 129); }

TEST(Resume, AStopBeforeAnyCheckpointSaysSoAndAdvisesNoResume) {
  TempDir dir;
  const std::string run = dir.File("early");
  {
    // Nearly every message held 2 s: the signal comes long before a step completes.
    BackgroundJob job(std::string("train ") + kJob +
                          " --set fault.delay_fraction=0.99 --set fault.delay_ms=2000 --set checkpoint.every_steps=0 "
                          "--run-dir " +
                          run,
                      dir.File("early.out"));
    for (int i = 0;
         i < 600 && BackgroundJob::ReadAll(run + "/logs/supervisor.log").find("started pid") == std::string::npos;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    job.SignalGroup(SIGINT);
    ASSERT_EQ(job.Wait(std::chrono::seconds(150)), 130) << job.Output();
    if (NewestCompleteCheckpoint(run) >= 0) GTEST_SKIP() << "a step completed before the signal; nothing to check";
    EXPECT_NE(job.Output().find("no checkpoint was written"), std::string::npos) << job.Output();
    EXPECT_NE(job.Output().find("--overwrite"), std::string::npos) << job.Output();
    EXPECT_EQ(job.Output().find("continue with"), std::string::npos) << job.Output();
  }
}

// A 4-rank mpirun job of kJob in `run`, stopped in order after step `at_least` (`output` its
// mpirun's): it advises how to continue, its checkpoint of the step both workers stopped after is
// complete, and its resume under mpirun ends with the `undisturbed` weights.
void ExpectAStoppedMpirunJobToResumeToTheSameWeights(const std::string& output, const std::string& run,
                                                     const std::string& undisturbed, int64_t at_least = 20) {
  EXPECT_TRUE(testing::HasText(output, ContinueAdvice(run, "mpirun ... "))) << output;
  const int64_t cut = StoppedCut(run);
  ASSERT_GE(cut, at_least) << BackgroundJob::ReadAll(run + "/logs/worker-0.log");
  EXPECT_TRUE(std::filesystem::exists(CheckpointManifest(run, cut))) << CheckpointManifest(run, cut);

  CommandResult resumed = testing::RunPsformerUnderMpirun(
      4, "train --config " + run + "/config.pbtxt --run-dir " + run + " --resume" + kNoDelays);
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_EQ(ModelDigest(run + "/model.bin"), undisturbed);
}

// SIGUSR1 to mpirun (what psformer launch sends on Ctrl-C) reaches every rank, and mpirun waits
// for them: the job stops in order however long its step takes. The server ranks stop only after
// every worker rank stopped its worker (an MPI barrier), so the checkpoint is as complete as on one
// machine. (A Ctrl-C to a bare mpirun gives the ranks a second before it kills them: these steps'
// checkpoint was lost so, every time.)
TEST(Resume, Sigusr1ToMpirunStopsInOrderHoweverLongTheStep) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  const std::string run = dir.File("interrupted");
  CommandResult stopped;
  {
    BackgroundJob job(std::string("train ") + kJob + kStepsLongerThanMpirunsGrace +
                          " --set checkpoint.every_steps=0 --run-dir " + run,
                      run + ".out", "mpirun --allow-run-as-root --oversubscribe -np 4 ");
    ASSERT_TRUE(testing::WaitForStep(&job, run, 2, std::chrono::seconds(120))) << job.Output();
    ASSERT_EQ(kill(job.pid(), SIGUSR1), 0);  // mpirun alone, as `kill -USR1 MPIRUN_PID`
    stopped.exit_status = job.Wait(std::chrono::seconds(150));
    stopped.output = job.Output();
  }
  EXPECT_EQ(stopped.exit_status, 130) << stopped.output;
  EXPECT_FALSE(testing::HasText(stopped.output, "did not stop in time")) << stopped.output;
  ExpectAStoppedMpirunJobToResumeToTheSameWeights(stopped.output, run, undisturbed, 2);
}

// A SIGTERM to one rank's supervisor alone (a kill of its pid, the shutdown of its node): the
// other ranks hear of it from that rank and the whole job stops in order, as on a Ctrl-C to
// mpirun. (The other ranks once went on without it and waited for its servers until they gave
// up; the job lost every step since its last checkpoint.)
TEST(Resume, ASigtermToOneRankUnderMpirunStopsTheWholeJobInOrder) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  const std::string run = dir.File("run");
  CommandResult stopped;
  {
    BackgroundJob job(std::string("train ") + kJob + kSlowSteps + " --set checkpoint.every_steps=0 --run-dir " + run,
                      run + ".out", "mpirun --allow-run-as-root --oversubscribe -np 4 ");
    ASSERT_TRUE(testing::WaitForStep(&job, run, 20, std::chrono::seconds(120))) << job.Output();
    const std::vector<pid_t> role = testing::StartedPids(run + "/logs/supervisor-1.log");
    ASSERT_EQ(role.size(), 1u) << BackgroundJob::ReadAll(run + "/logs/supervisor-1.log");
    const pid_t supervisor = testing::ParentOf(role[0]);
    ASSERT_GT(supervisor, 1) << role[0];
    ASSERT_EQ(kill(supervisor, SIGTERM), 0) << supervisor;
    stopped.exit_status = job.Wait(std::chrono::seconds(150));
    stopped.output = job.Output();
  }
  EXPECT_EQ(stopped.exit_status, 130) << stopped.output;
  for (const int rank : {0, 2, 3}) {
    const std::string log = BackgroundJob::ReadAll(run + "/logs/supervisor-" + std::to_string(rank) + ".log");
    EXPECT_TRUE(testing::HasText(log, "rank 1 was interrupted and stops the job")) << rank << "\n" << log;
  }
  EXPECT_FALSE(testing::HasText(stopped.output, "did not stop in time")) << stopped.output;
  ExpectAStoppedMpirunJobToResumeToTheSameWeights(stopped.output, run, undisturbed);
}

// The arguments of `psformer launch` training kJob (slow steps, no periodic checkpoint) into
// `run` on a cluster of this one host (testing::LaunchOnThisHost).
std::string OneHostLaunch(const TempDir& dir, const std::string& run, const char* slow_steps = kSlowSteps) {
  return testing::LaunchOnThisHost(dir, 4,
                                   std::string(kJob) + slow_steps + " --set checkpoint.every_steps=0 --run-dir " + run);
}

// psformer launch on this machine alone: Ctrl-C reaches launch, mpirun and the ranks (one
// foreground process group, as at a terminal); launch ends with 130 and names the checkpoint.
// Its steps take longer than the second a bare mpirun gives its ranks after a Ctrl-C: launch
// passes the Ctrl-C on as SIGUSR1, and the job stops in order, its checkpoint complete.
TEST(Resume, CtrlCThroughLaunchExits130AndNamesTheCheckpoint) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  const std::string run = dir.File("launched");
  CommandResult stopped;
  {
    BackgroundJob job(OneHostLaunch(dir, run, kStepsLongerThanMpirunsGrace), dir.File("launched.out"));
    ASSERT_TRUE(testing::WaitForStep(&job, run, 2, std::chrono::seconds(120))) << job.Output();
    job.SignalGroup(SIGINT);
    stopped.exit_status = job.Wait(std::chrono::seconds(150));
    stopped.output = job.Output();
  }
  ASSERT_EQ(stopped.exit_status, 130) << stopped.output;
  const int64_t newest = NewestCompleteCheckpoint(run);
  EXPECT_TRUE(testing::HasText(stopped.output,
                               "--resume added to the train arguments (newest complete checkpoint: " +
                                   std::filesystem::path(CheckpointManifest(run, newest)).parent_path().string() + ")"))
      << stopped.output;
  EXPECT_EQ(newest, StoppedCut(run));
  ExpectAStoppedMpirunJobToResumeToTheSameWeights(stopped.output, run, undisturbed, 2);
}

// The same through psformer launch, piped into a console that goes away, then SIGINT or SIGHUP:
// launch and mpirun outlive the console, the ranks are stopped, launch ends with 130 (129) and
// its advice, which the console can no longer take, is in RUN_DIR/logs/launch.log.
void ExpectALaunchToStopInOrderWithTheConsoleGone(int signal, int exit_status) {
  TempDir dir;
  const std::string run = dir.File("launched");
  BackgroundJob job(OneHostLaunch(dir, run), dir.File("launched.out"), BackgroundJob::ConsoleThatCloses{1});
  ASSERT_TRUE(testing::WaitForStep(&job, run, 20, std::chrono::seconds(120))) << job.Output();
  job.SignalGroup(signal);
  ASSERT_EQ(job.Wait(std::chrono::seconds(150)), exit_status);
  // Launch passed the stop on as SIGUSR1, so mpirun let the ranks stop in order: the checkpoint
  // of the step the workers stopped after is complete, and the advice names it.
  const std::string log = BackgroundJob::ReadAll(run + "/logs/launch.log");
  EXPECT_TRUE(testing::HasText(log, signal == SIGHUP ? "hung up; not restarting." : "interrupted; not restarting."))
      << log;
  EXPECT_EQ(NewestCompleteCheckpoint(run), StoppedCut(run)) << log;
  EXPECT_TRUE(testing::HasText(log, "--resume added to the train arguments (newest complete checkpoint: ")) << log;
  // The job ran once: mpirun, whose output launch relays, did not die at its first write to the
  // console that was gone (it did, and took its ranks along, and launch restarted the job). What
  // the ranks said on their way out is in the log instead (a stop that launch passed on, whatever
  // launch itself was sent).
  const std::string supervisor = BackgroundJob::ReadAll(run + "/logs/supervisor-0.log");
  EXPECT_EQ(testing::CountText(supervisor, "worker-0: started pid"), 1) << supervisor;
  EXPECT_TRUE(testing::HasText(log, ContinueAdvice(run, "mpirun ... "))) << log;
}

TEST(Resume, CtrlCThroughLaunchWithTheConsoleGoneExits130) {
  ExpectALaunchToStopInOrderWithTheConsoleGone(SIGINT, 130);
}

TEST(Resume, AHangUpThroughLaunchWithTheConsoleGoneExits129) {
  ExpectALaunchToStopInOrderWithTheConsoleGone(SIGHUP, 129);
}

TEST(Resume, AJobKilledWholeContinuesFromItsLastCheckpointToTheSameWeights) {
  TempDir dir;
  const std::string undisturbed = UndisturbedDigest(dir);
  const std::string run = dir.File("killed");
  const std::string command = std::string("train ") + kJob + " --set checkpoint.every_steps=10 --run-dir " + run;
  {
    BackgroundJob job(command + kSlowSteps, dir.File("killed.out"));
    ASSERT_TRUE(testing::WaitForStep(&job, run, 35, std::chrono::seconds(120))) << job.Output();
    job.SignalGroup(SIGKILL);  // the supervisor and everything in its group; role processes follow it
    ASSERT_EQ(job.Wait(std::chrono::seconds(30)), 128 + SIGKILL);
  }
  // The role processes sit in process groups of their own and die with their supervisor
  // (PR_SET_PDEATHSIG), not with the group.
  const std::vector<pid_t> pids = testing::StartedPids(run + "/logs/supervisor.log");
  EXPECT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) {
    for (int i = 0; i < 250 && testing::ProcessRuns(pid); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(testing::ProcessRuns(pid)) << "role process " << pid << " outlived its supervisor";
  }
  // Their shared memory does not outlive them either: the supervisor's janitor (shm_janitor.h)
  // removes it (before, it stayed in /dev/shm until the next train on the host).
  std::vector<std::string> left = JobSegmentsLeft(run);
  for (int i = 0; i < 250 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = JobSegmentsLeft(run);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " segment(s) left, the first " << left.front();
  const int64_t newest = NewestCompleteCheckpoint(run);
  EXPECT_GE(newest, 30);
  EXPECT_LT(newest, 200);
  EXPECT_FALSE(std::filesystem::exists(run + "/model.bin"));

  ExpectResumedToTheSameWeights(RunPsformer(command + " --resume"), run, 0, newest, undisturbed);
}

// A Ctrl-C that comes as the roles start: each is asked to stop before it installed its handlers.
// The supervisor starts them with the stop signals blocked, so the ask waits for the handler;
// before, the worker died of the signal's default action ("worker-0 killed by signal 37 while
// stopping", and "not every role process stopped cleanly").
TEST(Stop, ACtrlCAsTheRolesStartStopsThemInOrder) {
  TempDir dir;
  const std::string run = dir.File("run");
  BackgroundJob job(std::string("train ") + kJob + " --set checkpoint.every_steps=0 --run-dir " + run,
                    dir.File("run.out"));
  const std::string log = run + "/logs/supervisor.log";
  for (int i = 0; i < 30000 && !testing::HasText(BackgroundJob::ReadAll(log), "worker-1: started pid") && !job.Exited();
       ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(testing::HasText(BackgroundJob::ReadAll(log), "worker-1: started pid")) << job.Output();
  job.SignalGroup(SIGINT);
  EXPECT_EQ(job.Wait(std::chrono::seconds(150)), 130) << job.Output();
  EXPECT_FALSE(testing::HasText(job.Output(), "killed by signal")) << job.Output();
  EXPECT_FALSE(testing::HasText(job.Output(), "not every role process stopped cleanly")) << job.Output();
}

// A second Ctrl-C while the job stops in order kills what is still stopping, and the console says
// that the user's interrupt did it (not that a role failed to stop in time). The emulated steps
// are 3 s long, so the workers are still finishing theirs when it comes.
TEST(Stop, ASecondInterruptKillsTheRolesStillStoppingAndSaysSo) {
  TempDir dir;
  const std::string run = dir.File("run");
  BackgroundJob job(
      "train --config configs/copy.pbtxt --set cluster.backend=EMULATED --set cluster.emulated_step_ms=3000 "
      "--set training.max_steps=1000 --set training.valid_every=0 --set logging.every_steps=1 "
      "--set checkpoint.every_steps=0 --run-dir " +
          run,
      run + ".out");
  ASSERT_TRUE(testing::WaitForStep(&job, run, 1, std::chrono::seconds(120))) << job.Output();
  job.SignalGroup(SIGINT);
  ASSERT_TRUE(testing::WaitUntil(&job, std::chrono::seconds(30), [&] {
    return testing::HasText(job.Output(), "interrupt again to kill at once");
  })) << job.Output();
  job.SignalGroup(SIGINT);
  EXPECT_EQ(job.Wait(std::chrono::seconds(60)), 130) << job.Output();
  EXPECT_TRUE(testing::HasText(job.Output(), "interrupted again while it stopped; killing it")) << job.Output();
  EXPECT_TRUE(testing::HasText(job.Output(), "interrupted again: the role processes still stopping were killed"))
      << job.Output();
  EXPECT_FALSE(testing::HasText(job.Output(), "did not stop in time")) << job.Output();
}

// A worker asked to stop (SIGTERM: how its supervisor passes a Ctrl-C on) while no server has
// answered its HELLO yet (one still starting, or unreachable) exits at once and cleanly, instead
// of resending until its timeout while the supervisor waits to kill it. Nothing listens at the
// server endpoint given here.
TEST(Stop, AWorkerAskedToStopBeforeAnyServerAnswersExitsAtOnce) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("run"));
  BackgroundJob job(std::string("worker --config configs/copy.pbtxt --run-dir ") + dir.File("run") +
                        " --index 0 --servers tcp://127.0.0.1:9",
                    dir.File("worker.out"));
  const std::string waiting = "no answer from shard 0 to HELLO";
  for (int i = 0; i < 600 && job.Output().find(waiting) == std::string::npos && !job.Exited(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(job.Output().find(waiting), std::string::npos) << job.Output();
  job.SignalGroup(SIGTERM);
  EXPECT_EQ(job.Wait(std::chrono::seconds(30)), 0) << job.Output();
  EXPECT_NE(job.Output().find("stopped before training (asked to stop while waiting for the servers"),
            std::string::npos)
      << job.Output();
}

}  // namespace
}  // namespace psformer
