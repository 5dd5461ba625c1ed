// A run directory belongs to one run: `train` refuses a directory holding another run unless
// told --resume or --overwrite, and --resume continues the same model or fails. Every refusal
// must leave the directory's files byte for byte as they were.
#include "launcher/run_directory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "launcher/job_runner.h"
#include "tests/background_job.h"
#include "tests/held_port.h"
#include "tests/test_util.h"
#include "worker/backend/backend_factory.h"

namespace psformer::testing {
namespace {

// 20 steps of the copy task with a checkpoint every 10: a run with model.bin and checkpoints.
const char* kRun =
    "train --config configs/copy.pbtxt --set training.max_steps=20 --set training.valid_every=0 "
    "--set training.stop_at_valid_accuracy=0 --set logging.every_steps=5 --set checkpoint.every_steps=10";

// Every file under `dir` with its size and a hash of its bytes (a failure then lists names, not
// megabytes of weights).
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    const std::string name = std::filesystem::relative(entry.path(), dir).string();
    if (!entry.is_regular_file()) {
      files[name] = "<directory>";
      continue;
    }
    const std::string bytes = ReadTextFile(entry.path());
    files[name] = std::to_string(bytes.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(bytes));
  }
  return files;
}

class RunDirectory : public ::testing::Test {
 protected:
  // A finished run in `name`, trained once for the suite's tests that need one.
  std::string TrainedRun(const std::string& name) {
    const std::string run = dir_.File(name);
    const CommandResult r = RunPsformer(std::string(kRun) + " --run-dir " + run);
    EXPECT_EQ(r.exit_status, 0) << r.output;
    EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step-00000020/manifest.pbtxt")) << r.output;
    return run;
  }
  TempDir dir_;
};

TEST_F(RunDirectory, TrainRefusesADirectoryHoldingAnotherRunAndLeavesItAlone) {
  const std::string run = TrainedRun("run");
  const auto before = Snapshot(run);
  const CommandResult again = RunPsformer(std::string(kRun) + " --set model.d_model=32 --run-dir " + run);
  EXPECT_TRUE(EndsSaying(again, 1, "already holds a run"));
  EXPECT_TRUE(HasText(again.output, "--resume")) << again.output;
  EXPECT_TRUE(HasText(again.output, "--overwrite")) << again.output;
  EXPECT_EQ(Snapshot(run), before);
}

// The same-host sockets lie under the run directory, and their paths travel to the workers in a
// comma-separated list: a directory named with a comma once split one endpoint in two, and every
// worker refused to start. Any name trains, to the same weights.
TEST_F(RunDirectory, ANameWithACommaAPercentSignAndSpacesTrainsTheSameModel) {
  const std::string job = std::string(kRun) + " --set cluster.servers=2 --set cluster.workers=2";
  std::string digests[2];
  int i = 0;
  for (const std::string name : {"plain", "en,de 50% (2)"}) {
    const std::string run = dir_.File(name);
    const CommandResult r = RunPsformer(job + " --run-dir '" + run + "'");
    ASSERT_EQ(r.exit_status, 0) << name << "\n" << r.output;
    digests[i++] = ModelDigest("'" + run + "/model.bin'");
  }
  EXPECT_FALSE(digests[0].empty());
  EXPECT_EQ(digests[1], digests[0]);
}

TEST_F(RunDirectory, OverwriteStartsOverAndSaysWhatItRemoved) {
  const std::string run = TrainedRun("run");
  const std::string notes = run + "/notes.txt";
  std::ofstream(notes) << "mine\n";
  // What an earlier job across hosts leaves in ipc/: its aggregators' sockets, its servers' link
  // boards (cluster.sums_first).
  std::filesystem::create_directories(run + "/ipc");
  std::ofstream(run + "/ipc/aggregator-1.sock") << "";
  std::ofstream(run + "/ipc/pserver-0.sock.link") << "board";
  // Ten steps only: the old run's checkpoint of step 20 must not survive to be mixed in.
  const CommandResult r = RunPsformer(std::string(kRun) + " --set training.max_steps=10 --overwrite --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(HasText(r.output, "--overwrite: removed the earlier run's")) << r.output;
  EXPECT_TRUE(HasText(r.output, "model.bin")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/step-00000020"));
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step-00000010/manifest.pbtxt"));
  EXPECT_TRUE(HasText(ReadTextFile(run + "/config.pbtxt"), "max_steps: 10"));
  EXPECT_EQ(ReadTextFile(notes), "mine\n");  // not a file of the run: left alone
  EXPECT_FALSE(std::filesystem::exists(run + "/ipc/aggregator-1.sock")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/ipc/pserver-0.sock.link")) << r.output;
}

TEST_F(RunDirectory, OverwriteKeepsAndNamesFilesThatAreNotPsformers) {
  const std::string run = TrainedRun("run");
  std::filesystem::create_directories(run + "/data");
  std::ofstream(run + "/checkpoints/my-own-model.pt") << "weights of mine\n";
  std::ofstream(run + "/logs/notes.txt") << "notes\n";
  std::ofstream(run + "/data/corpus.txt") << "text\n";
  // psformer's too, from runs of other kinds: host summing's aggregators, the local trainer,
  // a launch whose console was gone, validation BLEU's references.
  for (const char* f : {"logs/aggregator-1.log", "logs/trainer.log", "logs/launch.log"})
    std::ofstream(run + "/" + f) << "old\n";
  std::filesystem::create_directories(run + "/valid_bleu");
  std::ofstream(run + "/valid_bleu/reference.txt") << "old\n";
  // A shard a job killed while writing it left half-written (its ".tmp-PID" name).
  std::ofstream(run + "/checkpoints/step-00000020/shard-0000-of-0001.bin.tmp-4242") << "half\n";
  const CommandResult r = RunPsformer(std::string(kRun) + " --set training.max_steps=10 --overwrite --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(ReadTextFile(run + "/checkpoints/my-own-model.pt"), "weights of mine\n");
  EXPECT_EQ(ReadTextFile(run + "/logs/notes.txt"), "notes\n");
  EXPECT_EQ(ReadTextFile(run + "/data/corpus.txt"), "text\n");
  EXPECT_TRUE(HasText(r.output, "kept checkpoints/my-own-model.pt, data/, logs/notes.txt")) << r.output;
  // The earlier run's checkpoints and logs went, each named, since their folders stay.
  EXPECT_TRUE(HasText(r.output, "checkpoints/step-00000020/")) << r.output;
  EXPECT_TRUE(HasText(r.output, "logs/pserver-0.log")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/step-00000020"));
  for (const char* f : {"logs/aggregator-1.log", "logs/trainer.log", "logs/launch.log", "valid_bleu/reference.txt"}) {
    EXPECT_FALSE(std::filesystem::exists(run + "/" + f)) << f;
  }
}

// Holds RUN_DIR/.lock as a live job's supervisor does, naming a made-up holder.
class HeldRunLock {
 public:
  explicit HeldRunLock(const std::string& run) {
    // Close-on-exec: a psformer started by the test must not share this lock.
    fd_ = open((run + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(flock(fd_, LOCK_EX | LOCK_NB), 0);
    const std::string holder = "pid 4242 on host testhost since 2026-11-25T10:00:00Z\n";
    EXPECT_EQ(ftruncate(fd_, 0), 0);
    EXPECT_EQ(pwrite(fd_, holder.data(), holder.size(), 0), static_cast<ssize_t>(holder.size()));
  }
  ~HeldRunLock() { close(fd_); }

 private:
  int fd_ = -1;
};

// --overwrite clears the earlier run only once the new job has passed every check that could
// refuse it: a port in use, a GPU asked for on a machine without one. Refused, the earlier run
// is there byte for byte.
TEST_F(RunDirectory, AnOverwriteTheJobRefusesLeavesTheEarlierRunAsItWas) {
  const std::string run = TrainedRun("run");
  const auto before = Snapshot(run);
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  const std::string overwrite = std::string(kRun) + " --set training.max_steps=10 --overwrite --run-dir " + run;
  CommandResult r = RunPsformer(overwrite + " --set cluster.base_port=" + std::to_string(held.port()));
  EXPECT_TRUE(EndsSaying(r, 1, "the port is in use; choose another cluster.base_port"));
  EXPECT_FALSE(HasText(r.output, "removed the earlier run's")) << r.output;
  EXPECT_EQ(Snapshot(run), before);
  if (GpuCount() == 0) {
    r = RunPsformer(overwrite + " --set cluster.backend=CUDA");
    EXPECT_TRUE(EndsSaying(r, 1, "cluster.backend = CUDA but this machine ("));
    EXPECT_EQ(Snapshot(run), before);
  }
  // --local refuses the GPU it cannot give, before it clears anything either.
  r = RunPsformer(overwrite + " --local --set cluster.backend=CUDA");
  EXPECT_TRUE(EndsSaying(r, 1, "--local trains with the CPU backend; cluster.backend = CUDA"));
  EXPECT_EQ(Snapshot(run), before);
}

// A run whose checkpoints/ is a link to another disk: --overwrite would leave what the link
// points to (it deletes inside the run directory only), and the new run would write among the
// earlier one's checkpoints. Refused, naming the link, with the run as it was.
TEST_F(RunDirectory, AnOverwriteOfARunWhoseCheckpointsAreALinkIsRefused) {
  const std::string run = TrainedRun("run");
  const std::string elsewhere = dir_.File("elsewhere");
  std::filesystem::rename(run + "/checkpoints", elsewhere);
  std::filesystem::create_directory_symlink(elsewhere, run + "/checkpoints");
  const auto before = Snapshot(run);
  const auto kept = Snapshot(elsewhere);
  const CommandResult r = RunPsformer(std::string(kRun) + " --set training.max_steps=10 --overwrite --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "--overwrite: " + run + "/checkpoints is a symbolic link (to " + elsewhere + ")"));
  EXPECT_EQ(Snapshot(run), before);
  EXPECT_EQ(Snapshot(elsewhere), kept);
}

TEST_F(RunDirectory, ALiveJobsDirectoryIsRefusedToTrainResumeAndOverwriteAlike) {
  const std::string run = TrainedRun("run");
  HeldRunLock live(run);
  const auto before = Snapshot(run);
  for (const std::string flag : {"", " --resume", " --overwrite"}) {
    const CommandResult r =
        RunPsformer(std::string(kRun) + " --set training.max_steps=30" + flag + " --run-dir " + run);
    EXPECT_TRUE(EndsSaying(r, 1, "is in use by a live job: pid 4242 on host testhost")) << flag;
    EXPECT_EQ(Snapshot(run), before) << flag;
  }
}

TEST_F(RunDirectory, AJobMayWaitForTheLiveJobBeforeItToEnd) {
  // psformer launch restarts a job while ranks of the ended one may still be stopping.
  const std::string run = TrainedRun("run");
  auto live = std::make_unique<HeldRunLock>(run);
  BackgroundJob job(std::string(kRun) + " --set training.max_steps=30 --wait-for-run-dir 120 --resume --run-dir " + run,
                    dir_.File("waiting.out"));
  for (int i = 0; i < 1200 && !HasText(job.Output(), "waiting up to 120 s for it to end") && !job.Exited(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(HasText(job.Output(), "in use by a live job: pid 4242 on host testhost")) << job.Output();
  live.reset();  // the job before ends
  EXPECT_EQ(job.Wait(std::chrono::seconds(120)), 0) << job.Output();
}

TEST_F(RunDirectory, ARefusedRunLeavesAnUnlockedDirectoryAsItWas) {
  // The finished run's .lock is empty; a refusal (here: another run's files) restores it.
  const std::string run = TrainedRun("run");
  ASSERT_EQ(ReadTextFile(run + "/.lock"), "");
  const auto before = Snapshot(run);
  EXPECT_TRUE(EndsSaying(RunPsformer(std::string(kRun) + " --run-dir " + run), 1, "already holds a run"));
  EXPECT_EQ(Snapshot(run), before);
}

TEST_F(RunDirectory, ASecondJobOnALiveRunIsRefusedAndTheLockGoesWithAKilledJob) {
  const std::string run = dir_.File("live");
  BackgroundJob job(std::string(kRun) + " --set training.max_steps=100000 --run-dir " + run, dir_.File("job.out"));
  ASSERT_TRUE(WaitForStep(&job, run, 1, std::chrono::seconds(120))) << job.Output();
  const std::string holder = "pid " + std::to_string(job.pid()) + " on host ";
  EXPECT_TRUE(HasText(ReadTextFile(run + "/.lock"), holder)) << ReadTextFile(run + "/.lock");
  for (const std::string flag : {"", " --resume", " --overwrite"}) {
    const CommandResult r = RunPsformer(std::string(kRun) + flag + " --run-dir " + run);
    EXPECT_TRUE(EndsSaying(r, 1, "is in use by a live job: " + holder)) << flag;
  }
  job.SignalGroup(SIGKILL);
  ASSERT_GE(job.Wait(std::chrono::seconds(60)), 0);
  // The kernel dropped the dead job's lock: the directory may be used again at once.
  const CommandResult again =
      RunPsformer(std::string(kRun) + " --set training.max_steps=5 --overwrite --run-dir " + run);
  EXPECT_EQ(again.exit_status, 0) << again.output;
}

// A live job's directory removed and made again under the same name (`rm -rf RUN` and another
// job there), or moved away: the job ends at once, exit 1, saying which; nothing of it lands in
// the new directory, and a moved run continues from where it went.
TEST_F(RunDirectory, AJobWhoseDirectoryIsReplacedOrMovedEndsAndWritesNothingThere) {
  const std::string run = dir_.File("live");
  const std::string live_job = std::string(kRun) + " --set training.max_steps=100000 --set checkpoint.every_steps=5";
  {
    BackgroundJob job(live_job + " --run-dir " + run, dir_.File("job1.out"));
    ASSERT_TRUE(WaitForStep(&job, run, 1, std::chrono::seconds(120))) << job.Output();
    std::filesystem::remove_all(run);
    std::filesystem::create_directory(run);
    dir_.Write("live/notes.txt", "not the job's\n");
    EXPECT_EQ(job.Wait(std::chrono::seconds(60)), 1) << job.Output();
    EXPECT_TRUE(
        HasText(job.Output(), "psformer train: error: the run directory " + run +
                                  " was replaced (removed and made again, perhaps by another job) while the job ran"))
        << job.Output();
    // Past the job's end, and past the cadence of its checkpoints: nothing came.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(Snapshot(run).size(), 1u);
    EXPECT_EQ(ReadTextFile(run + "/notes.txt"), "not the job's\n");
  }
  std::filesystem::remove_all(run);
  const std::string moved = dir_.File("moved");
  BackgroundJob job(live_job + " --run-dir " + run, dir_.File("job2.out"));
  ASSERT_TRUE(WaitForStep(&job, run, 10, std::chrono::seconds(120))) << job.Output();
  std::filesystem::rename(run, moved);
  EXPECT_EQ(job.Wait(std::chrono::seconds(60)), 1) << job.Output();
  EXPECT_TRUE(HasText(job.Output(), "the run directory " + run + " was removed or renamed while the job ran"))
      << job.Output();
  EXPECT_FALSE(std::filesystem::exists(run));
  const int64_t further = LastLoggedStep(moved) + 20;  // past any checkpoint it wrote
  const CommandResult resumed =
      RunPsformer("train --config " + moved +
                  "/config.pbtxt --resume --set training.max_steps=" + std::to_string(further) + " --run-dir " + moved);
  EXPECT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_TRUE(std::filesystem::exists(moved + "/model.bin")) << resumed.output;
}

TEST_F(RunDirectory, ResumeWithAnotherModelNamesEachFieldAndTouchesNothing) {
  const std::string run = TrainedRun("run");
  const auto before = Snapshot(run);
  const CommandResult r = RunPsformer(std::string(kRun) +
                                      " --set model.d_model=128 --set optimizer.warmup_steps=100 "
                                      "--set training.max_steps=30 --resume --run-dir " +
                                      run);
  EXPECT_TRUE(EndsSaying(r, 1, "model.d_model: the run has 64, this config 128"));
  EXPECT_TRUE(HasText(r.output, "optimizer.warmup_steps: the run has 200, this config 100")) << r.output;
  EXPECT_FALSE(HasText(r.output, "training.max_steps")) << r.output;  // may change
  EXPECT_EQ(Snapshot(run), before);
}

TEST_F(RunDirectory, ResumeContinuesWithMoreStepsAndAnotherCheckpointCadence) {
  const std::string run = TrainedRun("run");
  const CommandResult r = RunPsformer(std::string(kRun) +
                                      " --set training.max_steps=30 --set checkpoint.every_steps=15 "
                                      "--set logging.every_steps=3 --resume --run-dir " +
                                      run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(HasText(ReadTextFile(run + "/logs/pserver-0.log"), "resumes from the checkpoint of step 20"));
  EXPECT_TRUE(HasText(ReadTextFile(run + "/config.pbtxt"), "max_steps: 30"));
}

// A run that ends between two periodic checkpoints is checkpointed at its last step, so it
// continues from there (not from its last periodic one) and `psformer average` sees its final
// weights; continued to a longer end it holds the weights of a run trained that long at once. A
// last step the periodic cadence checkpointed already is not written twice.
TEST_F(RunDirectory, AFinishedRunIsCheckpointedAtItsLastStepAndContinuesFromThere) {
  const std::string run = dir_.File("run");
  const std::string job = std::string(kRun) + " --set cluster.servers=2 --set cluster.workers=2";
  CommandResult r = RunPsformer(job + " --set training.max_steps=23 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(NewestCompleteCheckpoint(run), 23) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step-00000020")) << "the periodic ones stay";
  r = RunPsformer("train --config " + run + "/config.pbtxt --resume --set training.max_steps=30 --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(HasText(ReadTextFile(run + "/logs/pserver-1.log"), "resumes from the checkpoint of step 23"));

  const std::string at_once = dir_.File("at-once");
  r = RunPsformer(job + " --set training.max_steps=30 --run-dir " + at_once);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(ModelDigest(run + "/model.bin"), ModelDigest(at_once + "/model.bin"));
  for (const std::string shard : {"0", "1"}) {
    EXPECT_EQ(CountText(ReadTextFile(at_once + "/logs/pserver-" + shard + ".log"),
                        "shard " + shard + " wrote its checkpoint of step 30"),
              1);
  }
}

// Resumed without a higher training.max_steps, a finished run has nothing left to train: the job
// says so and ends at once with the same model, every worker done. (Worker 0 used to end the job
// before worker 1 had reached the servers, whose HELLO then waited 600 s for a server that was
// gone, restart after restart.)
TEST_F(RunDirectory, AFinishedRunResumedWithoutMoreStepsEndsAtOnceWithItsModel) {
  const std::string run = dir_.File("run");
  const std::string job =
      std::string(kRun) + " --set cluster.servers=2 --set cluster.workers=2 --set training.max_steps=23";
  ASSERT_EQ(RunPsformer(job + " --run-dir " + run).exit_status, 0);
  const std::string digest = ModelDigest(run + "/model.bin");
  const CommandResult r = RunPsformer("train --config " + run + "/config.pbtxt --resume --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(HasText(r.output, "nothing left to train: the run is at step 23, training.max_steps")) << r.output;
  EXPECT_EQ(ModelDigest(run + "/model.bin"), digest);
  EXPECT_FALSE(HasText(r.output, "restarting")) << r.output;
  // The servers loaded that checkpoint; it is not written again.
  EXPECT_EQ(CountText(ReadTextFile(run + "/logs/pserver-0.log"), "shard 0 wrote its checkpoint of step 23"), 1);
}

// --dry-run of a resume answers as the resume does, both ways: it accepted nothing the run
// would refuse, but refused every resume of a run whose config left model.vocab_size to the
// data ("written for another model config": it checked the digest without the vocabulary).
TEST_F(RunDirectory, ADryRunOfAResumeAgreesWithTheResume) {
  const std::string run = TrainedRun("run");
  const auto before = Snapshot(run);
  const std::string resume = std::string(kRun) + " --set training.max_steps=30 --resume --run-dir " + run;
  const CommandResult dry = RunPsformer(resume + " --dry-run");
  EXPECT_EQ(dry.exit_status, 0) << dry.output;
  EXPECT_EQ(Snapshot(run), before);
  // Without the line of step 20 (as after a stop at a checkpoint's step, whose loss over every
  // worker is not known to the stopping job), the resumed job logs steps 21-30 in two lines: the
  // pull of step 20 it starts with, on a logging step, is no line of its own (it once was, with
  // loss 0 over 0 tokens).
  std::filesystem::remove(run + "/metrics.jsonl");
  EXPECT_EQ(RunPsformer(resume).exit_status, 0);
  const std::vector<double> steps = testing::MetricValues(run + "/metrics.jsonl", "steps");  // train lines only
  const std::vector<double> tokens = testing::MetricValues(run + "/metrics.jsonl", "tokens");
  EXPECT_EQ(steps, std::vector<double>(2, 5.0));
  EXPECT_EQ(tokens.size(), 2u);
  for (double t : tokens) EXPECT_GT(t, 0);
  const std::string past = std::string(kRun) + " --set training.max_steps=15 --resume --run-dir " + run;
  EXPECT_TRUE(EndsSaying(RunPsformer(past + " --dry-run"), 1, "past training.max_steps (15)"));
}

// A corrupt newest manifest: the resume falls back to the checkpoint before, and the console says
// which it skipped and why (it showed only protobuf's log line, naming no file).
TEST_F(RunDirectory, AResumePastACorruptManifestSaysWhichItSkipsOnTheConsole) {
  const std::string run = TrainedRun("run");
  std::ofstream(run + "/checkpoints/step-00000020/manifest.pbtxt", std::ios::trunc) << "step: banana\n";
  const std::string resume = std::string(kRun) + " --set training.max_steps=30 --resume --run-dir " + run;
  const CommandResult dry = RunPsformer(resume + " --dry-run");
  EXPECT_TRUE(EndsSaying(dry, 0,
                         "warning: --resume: skipping the checkpoint of step 20: manifest " + run +
                             "/checkpoints/step-00000020/manifest.pbtxt does not parse (1:7: Expected integer, got: "
                             "banana); resuming from step 10"));
  EXPECT_FALSE(HasText(dry.output, "libprotobuf")) << dry.output;
}

TEST_F(RunDirectory, ResumeWithMaxStepsBelowTheNewestCheckpointIsRefusedUpFront) {
  const std::string run = TrainedRun("run");
  const auto before = Snapshot(run);
  const CommandResult r = RunPsformer(std::string(kRun) + " --set training.max_steps=15 --resume --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "the newest checkpoint in " + run + " is of step 20, past training.max_steps (15)"));
  EXPECT_FALSE(HasText(r.output, "restarting")) << r.output;
  EXPECT_EQ(Snapshot(run), before);
}

TEST_F(RunDirectory, ResumeOfAMissingDirectoryFailsAndCreatesNothing) {
  const std::string run = dir_.File("never");
  const CommandResult r = RunPsformer(std::string(kRun) + " --resume --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "does not exist"));
  EXPECT_FALSE(std::filesystem::exists(run));
}

TEST_F(RunDirectory, ResumeWithoutAUsableCheckpointFailsAndTouchesNothing) {
  // A run stopped before its first checkpoint: config.pbtxt and logs, no checkpoint.
  const std::string run = TrainedRun("run");
  std::filesystem::remove_all(run + "/checkpoints");
  std::filesystem::create_directories(run + "/checkpoints/step-00000030");  // incomplete: no manifest
  const auto before = Snapshot(run);
  const CommandResult r = RunPsformer(std::string(kRun) + " --resume --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "nothing to continue"));
  EXPECT_TRUE(HasText(r.output, "step 30")) << r.output;
  EXPECT_EQ(Snapshot(run), before);
}

TEST_F(RunDirectory, ResumeOfADirectoryThatIsNoRunFails) {
  const std::string run = dir_.File("other");
  std::filesystem::create_directories(run);
  std::ofstream(run + "/data.txt") << "not a run\n";
  const auto before = Snapshot(run);
  const CommandResult r = RunPsformer(std::string(kRun) + " --resume --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "no config.pbtxt"));
  EXPECT_EQ(Snapshot(run), before);
}

// A run whose config.pbtxt was emptied (or left with comments alone) is damaged, and said so:
// read as every default, it was compared field by field with the config given ("data.train_dir:
// the run has \"\", ..."), as though the run had trained another model.
TEST_F(RunDirectory, ResumeOfARunWhoseConfigWasEmptiedSaysSo) {
  const std::string run = TrainedRun("run");
  std::ofstream(run + "/config.pbtxt") << "# emptied\n";
  const auto before = Snapshot(run);
  const CommandResult r = RunPsformer(std::string(kRun) + " --set training.max_steps=30 --resume --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1,
                         "--resume: the run's config: " + run +
                             "/config.pbtxt sets nothing (it is empty or only comments): psformer train wrote the "
                             "run's resolved config there, and it was emptied or replaced since"));
  EXPECT_FALSE(HasText(r.output, "the run has")) << r.output;
  EXPECT_EQ(Snapshot(run), before);
}

TEST_F(RunDirectory, LocalResumeWithAnotherModelIsRefusedToo) {
  const std::string run = dir_.File("local");
  const std::string local = std::string(kRun) + " --local --set training.max_steps=5 --run-dir " + run;
  ASSERT_EQ(RunPsformer(local).exit_status, 0);
  const auto before = Snapshot(run);
  const CommandResult r = RunPsformer(local + " --set model.layers=3 --resume");
  EXPECT_TRUE(EndsSaying(r, 1, "model.layers: the run has 2, this config 3"));
  EXPECT_EQ(Snapshot(run), before);
}

// A checkpoint of another model in the run (copied in from another run): the servers refuse to
// load it, so the resume refuses it up front, naming it and what to do, rather than stepping past
// it to an older one (and losing the steps since) or failing at the servers. A resume says which
// checkpoint it continues from.
TEST_F(RunDirectory, AResumeRefusesAnotherModelsCheckpointUpFrontAndSaysWhereItResumes) {
  const std::string run = TrainedRun("run");
  const std::string other = dir_.File("other");
  ASSERT_EQ(RunPsformer(std::string(kRun) + " --set model.dropout=0.25 --set training.max_steps=30 --run-dir " + other)
                .exit_status,
            0);
  std::filesystem::copy(other + "/checkpoints/step-00000030", run + "/checkpoints/step-00000030");
  const auto before = Snapshot(run);
  const std::string resume = std::string(kRun) + " --set training.max_steps=40 --resume --run-dir " + run;
  CommandResult r = RunPsformer(resume);
  EXPECT_TRUE(EndsSaying(r, 1, "--resume: the checkpoint of step 30 cannot be resumed: "));
  EXPECT_TRUE(
      HasText(r.output, "to resume from an earlier one, move " + run + "/checkpoints/step-00000030 out of the run"))
      << r.output;
  EXPECT_EQ(Snapshot(run), before);
  std::filesystem::remove_all(run + "/checkpoints/step-00000030");
  r = RunPsformer(resume);
  EXPECT_TRUE(EndsSaying(r, 0, "--resume: from the checkpoint of step 20"));
}

// A run summed in host groups [1, 1] by two workers. Resumed without its groups, with the groups
// emptied, or with cluster.workers=0 (which the docs say matches any), the resume takes them from
// the run: before, each of these passed the up-front check, rewrote config.pbtxt, and failed at
// the servers, after which no command line resumed the run.
TEST_F(RunDirectory, AResumeThatLeavesTheGroupsOrWorkersOpenTakesTheRunsOwn) {
  const std::string run = dir_.File("grouped");
  const std::string grouped = " --set cluster.workers=2 --set cluster.host_groups=1,1";
  ASSERT_EQ(RunPsformer(std::string(kRun) + grouped + " --run-dir " + run).exit_status, 0);
  int max_steps = 20;
  for (const std::string& variant :
       {std::string(" --set cluster.workers=2"), std::string(" --set cluster.workers=2 --set cluster.host_groups="),
        std::string(" --set cluster.workers=0"), std::string(" --set cluster.workers=0 --set cluster.host_groups=")}) {
    max_steps += 5;
    const CommandResult r =
        RunPsformer(std::string(kRun) + variant + " --set checkpoint.every_steps=5" +
                    " --set training.max_steps=" + std::to_string(max_steps) + " --resume --run-dir " + run);
    ASSERT_EQ(r.exit_status, 0) << variant << "\n" << r.output;
    EXPECT_TRUE(HasText(ReadTextFile(run + "/logs/pserver-0.log"),
                        "resumes from the checkpoint of step " + std::to_string(max_steps - 5)))
        << variant;
    const std::string config = ReadTextFile(run + "/config.pbtxt");
    EXPECT_TRUE(HasText(config, "host_groups: 1\n")) << variant << "\n" << config;
    EXPECT_TRUE(HasText(config, "workers: 2\n")) << variant << "\n" << config;
  }
}

// Emulated workers push synthetic gradients: a real run resumed as emulated would end with them
// (and rotate its real checkpoints out). Refused up front, the run untouched; the dry run agrees.
TEST_F(RunDirectory, AResumeThatSwitchesToEmulatedWorkersIsRefusedAndTouchesNothing) {
  const std::string run = TrainedRun("run");
  const auto before = Snapshot(run);
  const std::string emulated = std::string(kRun) + " --set cluster.backend=EMULATED --set training.max_steps=30";
  const CommandResult r = RunPsformer(emulated + " --resume --run-dir " + run);
  EXPECT_TRUE(EndsSaying(r, 1, "cluster.backend: the run has CPU, this config EMULATED")) << r.output;
  EXPECT_EQ(Snapshot(run), before);
  EXPECT_TRUE(EndsSaying(RunPsformer(emulated + " --resume --dry-run --run-dir " + run), 1,
                         "cluster.backend: the run has CPU, this config EMULATED"));
}

// A resume that passes every up-front check and then ends without a new checkpoint (here its
// server is killed with no restart left) leaves the run's config.pbtxt as it was, so that the
// run's own continue command goes on from the same checkpoint.
TEST_F(RunDirectory, AResumeThatWritesNoCheckpointLeavesTheRunsConfigAsItWas) {
  const std::string run = TrainedRun("run");
  const std::string config_before = ReadTextFile(run + "/config.pbtxt");
  const CommandResult failed =
      RunPsformer(std::string(kRun) +
                  " --set training.max_steps=40 --set cluster.max_restarts=0 --set fault.kill=server:0@22 --resume "
                  "--run-dir " +
                  run);
  EXPECT_EQ(failed.exit_status, 1) << failed.output;
  EXPECT_TRUE(HasText(failed.output, "is as it was before")) << failed.output;
  EXPECT_EQ(ReadTextFile(run + "/config.pbtxt"), config_before);
  const CommandResult resumed =
      RunPsformer("train --config " + run + "/config.pbtxt --run-dir " + run + " --resume --set training.max_steps=30");
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step-00000030/manifest.pbtxt"));
}

TEST(RunDirectoryUsage, EmptyRunDirAndContradictoryFlagsAreUsageErrors) {
  const CommandResult empty = RunPsformer(std::string(kRun) + " --run-dir ''");
  EXPECT_TRUE(EndsSaying(empty, 2, "--run-dir is empty"));
  TempDir dir;
  const CommandResult both = RunPsformer(std::string(kRun) + " --resume --overwrite --run-dir " + dir.File("x"));
  EXPECT_TRUE(EndsSaying(both, 2, "contradict"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("x")));
}

TEST(ResumeConflicts, ListsEveryWeightChangingFieldAndNothingElse) {
  JobConfig run;
  FillDefaults(&run);
  run.mutable_model()->set_vocab_size(16);
  JobConfig now = run;
  EXPECT_TRUE(ResumeConflicts(run, now).empty());
  now.mutable_training()->set_max_steps(run.training().max_steps() + 100);
  now.mutable_checkpoint()->set_every_steps(7);
  now.mutable_logging()->set_every_steps(3);
  now.mutable_cluster()->set_base_port(4000);
  now.mutable_fault()->set_kill("worker:0@3");
  now.set_name("renamed");
  now.mutable_model()->set_vocab_size(0);  // resolved from the data at start
  EXPECT_TRUE(ResumeConflicts(run, now).empty());
  now.mutable_training()->set_seed(99);
  now.mutable_cluster()->set_servers(2);
  now.mutable_schedule()->set_kind(proto::ScheduleConfig::CONSTANT);
  const std::vector<std::string> conflicts = ResumeConflicts(run, now);
  ASSERT_EQ(conflicts.size(), 3u);
  EXPECT_EQ(conflicts[0], "schedule.kind: the run has INVERSE_SQRT, this config CONSTANT");
  EXPECT_EQ(conflicts[1], "cluster.servers: the run has 1, this config 2");
  EXPECT_EQ(conflicts[2], "training.seed: the run has 1, this config 99");
}

TEST(ResumeConflicts, TheBackendMayChangeButNeverToOrFromEmulated) {
  JobConfig run;
  FillDefaults(&run);
  run.mutable_cluster()->set_backend(proto::ClusterConfig::CPU);
  JobConfig now = run;
  for (auto backend : {proto::ClusterConfig::AUTO, proto::ClusterConfig::CUDA}) {
    now.mutable_cluster()->set_backend(backend);
    EXPECT_TRUE(ResumeConflicts(run, now).empty());
  }
  now.mutable_cluster()->set_backend(proto::ClusterConfig::EMULATED);
  ASSERT_EQ(ResumeConflicts(run, now).size(), 1u);
  EXPECT_TRUE(HasText(ResumeConflicts(run, now)[0], "cluster.backend: the run has CPU, this config EMULATED"));
  ASSERT_EQ(ResumeConflicts(now, run).size(), 1u);
  EXPECT_TRUE(ResumeConflicts(now, now).empty());
}

TEST(InheritFromRun, WorkersAndHostGroupsLeftOpenAreTheRunsAndGivenOnesStay) {
  JobConfig run;
  FillDefaults(&run);
  run.mutable_cluster()->set_workers(4);
  run.mutable_cluster()->add_host_groups(2);
  run.mutable_cluster()->add_host_groups(2);
  JobConfig open = run;
  open.mutable_cluster()->set_workers(0);
  open.mutable_cluster()->clear_host_groups();
  EXPECT_EQ(InheritFromRun(run, &open), "cluster.workers = 4, cluster.host_groups = [2, 2]");
  EXPECT_TRUE(ResumeConflicts(run, open).empty());
  JobConfig given = run;
  given.mutable_cluster()->set_workers(3);
  given.mutable_cluster()->set_host_groups(0, 1);
  EXPECT_EQ(InheritFromRun(run, &given), "");
  EXPECT_EQ(given.cluster().workers(), 3);
  EXPECT_EQ(given.cluster().host_groups(0), 1);
}

// A config's name places the default run directory, so it may not leave runs/: a '/' or a space
// becomes '_', and a long name is cut (a 10 MB one made a 10 MB error message).
TEST(DefaultRunDir, StaysInsideRunsWhateverTheConfigsName) {
  JobConfig config;
  config.set_name("../../../tmp/escaped");
  const std::string escaped = DefaultRunDir(config);
  EXPECT_EQ(escaped.rfind("runs/.._.._.._tmp_escaped-", 0), 0u) << escaped;
  EXPECT_EQ(escaped.find('/', 5), std::string::npos) << escaped;
  config.set_name("wmt14 en/de");
  EXPECT_EQ(DefaultRunDir(config).rfind("runs/wmt14_en_de-", 0), 0u) << DefaultRunDir(config);
  config.set_name(std::string(100000, 'n'));
  EXPECT_EQ(DefaultRunDir(config).rfind("runs/" + std::string(64, 'n') + "-", 0), 0u);
  config.set_name("");
  EXPECT_EQ(DefaultRunDir(config).rfind("runs/run-", 0), 0u) << DefaultRunDir(config);
}

TEST(ResumeConflicts, SectionsThatMayChangeCoverTheirFieldsOnly) {
  EXPECT_TRUE(MayChangeOnResume("checkpoint.keep_last"));
  EXPECT_TRUE(MayChangeOnResume("logging.level"));
  EXPECT_TRUE(MayChangeOnResume("training.max_steps"));
  EXPECT_FALSE(MayChangeOnResume("training.seed"));
  EXPECT_FALSE(MayChangeOnResume("model.d_model"));
  EXPECT_FALSE(MayChangeOnResume("checkpointing"));
  EXPECT_FALSE(MayChangeOnResume("cluster.workers"));
  // Neither changes a weight (A12-r6, R-em: both were refused as "another model").
  EXPECT_TRUE(MayChangeOnResume("cluster.encryption"));
  EXPECT_TRUE(MayChangeOnResume("cluster.emulated_step_ms"));
  EXPECT_TRUE(MayChangeOnResume("cluster.emulated_copy_gb_per_s"));
}

}  // namespace
}  // namespace psformer::testing
