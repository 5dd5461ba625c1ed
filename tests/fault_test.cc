// Fault injection (label `fault`, docs/failure-model.md): role processes killed (also
// halfway through a checkpoint write), stalled past the heartbeat timeout, several faults in one
// run. Each run must finish by itself with exit status 0 and a model bitwise identical
// (`psformer checksum`) to the same run undisturbed; the logs must show the fault and the
// recovery, so a fault that silently did not happen cannot pass.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/fault_job_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

// The job (tests/fault_job_util.h), and what a run of it leaves.
const char* const kJob = testing::kFaultJob;
using Outcome = testing::FaultJobOutcome;
constexpr auto Train = testing::TrainFaultJob;

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

class Fault : public ::testing::Test {
 protected:
  // The undisturbed run every faulty run must reproduce.
  std::string Undisturbed() {
    const Outcome calm = Train(dir_, "calm", "");
    EXPECT_FALSE(calm.digest.empty());
    EXPECT_FALSE(Has(calm.logs, "fault injection")) << calm.logs;
    return calm.digest;
  }
  TempDir dir_;
};

// One faulty run: the flags that inject the faults, and what its logs must (and must not) show.
struct FaultCase {
  const char* name;
  const char* flags;
  std::vector<const char*> logged;
  std::vector<const char*> not_logged = {};
  const char* logged_pattern = nullptr;  // a regular expression the logs must match.
};

// Every case must finish by itself with the weights of the undisturbed run, bitwise.
const FaultCase kFaultCases[] = {
    {"KilledWorkerIsRestartedWithTheSameWeights",
     "--set fault.kill=worker:1@15",
     {"worker-1 killed by signal 9", "rejoining at step 15"}},
    // With overlap, some pieces of step 15 reached the servers and others did not: the restarted
    // worker recomputes the step, and the pieces already held are acknowledged as duplicates.
    {"WorkerKilledHalfwayThroughItsPush",
     "--set fault.kill=worker:1@15:push",
     {"halfway through the push of step 15", "worker-1 killed by signal 9"}},
    {"KilledServerMakesTheJobRollBackAndReplay",
     "--set fault.kill=server:0@25",
     {"pserver-0 killed by signal 9", "the job rolls back to step 20",
      "rolling back from step 25 to step 20",  // the other shard
      "recomputing from step 21"}},
    {"ServerKilledBeforeItsFirstCheckpointRestartsFromTheInitialWeights",
     "--set fault.kill=server:1@5",
     {"the job rolls back to step 0"}},
    {"KilledWorkerAndServerInOneRun",
     "--set fault.kill=worker:1@15,server:1@25,worker:0@33",
     {"worker-1 killed by signal 9", "pserver-1 killed by signal 9", "worker-0 killed by signal 9"}},
    {"ServersKilledRepeatedlyEachTimeRollBackToTheirNewestCheckpoint",
     "--set fault.kill=server:0@15,server:0@31,server:1@33",
     {"recovery epoch 1, the job rolls back to step 10", "recovery epoch 2, the job rolls back to step 30",
      "recovery epoch 3, the job rolls back to step 30"}},
    // Its shard of step 20 never got written, so step 20 is incomplete: back to step 10.
    {"ServerKilledWhileWritingACheckpointFallsBackToTheOneBefore",
     "--set fault.kill=server:0@20:checkpoint",
     {"while writing the checkpoint of step 20", "the job rolls back to step 10"}},
    // SIGSTOP for 20 s, far past the 1.5 s heartbeat timeout: only the supervisor can end it.
    {"StalledWorkerIsKilledByItsSupervisorAndRestarted",
     "--set fault.kill=worker:1@15:stall=20000 --set cluster.heartbeat_timeout_ms=1500",
     {"stopping myself (SIGSTOP)", "worker-1: no heartbeat for 1500 ms"},
     {"continuing after the stall"}},
    {"StalledServerIsKilledByItsSupervisorAndTheJobRollsBack",
     "--set fault.kill=server:1@25:stall=20000 --set cluster.heartbeat_timeout_ms=1500",
     {"pserver-1: no heartbeat for 1500 ms", "the job rolls back to step 20"}},
    // Transport faults (FaultyVan, drawn per sent message on workers and servers alike): lost
    // requests and replies are resent, repeated pushes are applied once.
    {"FivePercentOfMessagesDropped", "--set fault.drop_fraction=0.05 --set cluster.retry_ms=150", {"sending it again"}},
    {"DuplicatedMessages", "--set fault.duplicate_fraction=0.1", {}, {}, "duplicate pushes: [1-9]"},
    {"DelayedReorderedAndDroppedMessagesWithAServerKill",
     "--set fault.delay_fraction=0.05 --set fault.reorder_fraction=0.05 --set fault.drop_fraction=0.02 "
     "--set fault.delay_ms=30 --set fault.kill=server:1@25",
     {"the job rolls back to step 20"}},
};

class FaultyRun : public Fault, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(FaultyRun, EndsWithTheUndisturbedWeights) {
  const FaultCase& c = GetParam();
  const std::string calm = Undisturbed();
  const Outcome run = Train(dir_, "faulty", c.flags);
  for (const char* line : c.logged) EXPECT_TRUE(Has(run.logs, line)) << line << "\n" << run.logs;
  for (const char* line : c.not_logged) EXPECT_FALSE(Has(run.logs, line)) << line << "\n" << run.logs;
  if (c.logged_pattern != nullptr) {
    EXPECT_TRUE(std::regex_search(run.logs, std::regex(c.logged_pattern))) << c.logged_pattern << "\n" << run.logs;
  }
  EXPECT_EQ(run.digest, calm);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultyRun, ::testing::ValuesIn(kFaultCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Mixed precision on the wire (bf16 parameter copies to the workers, bf16 gradients back): the
// replay after a rollback pulls the same bf16 copies, so a killed worker and a killed server
// still end with the weights of the undisturbed bf16 run, which differ from the fp32 run's.
TEST_F(Fault, Bf16OnTheWireRecoversToTheSameWeights) {
  const std::string bf16 = "--set cluster.param_dtype=BF16 --set cluster.gradient_dtype=BF16";
  const Outcome calm = Train(dir_, "calm-bf16", bf16);
  const Outcome run = Train(dir_, "faulty", bf16 + " --set fault.kill=worker:1@15,server:0@25");
  EXPECT_TRUE(Has(run.logs, "worker-1 killed by signal 9")) << run.logs;
  EXPECT_TRUE(Has(run.logs, "the job rolls back to step 20")) << run.logs;
  EXPECT_TRUE(std::regex_search(run.logs, std::regex("\\([1-9][0-9]* in bf16\\)"))) << run.logs;
  EXPECT_EQ(run.digest, calm.digest);
  EXPECT_NE(calm.digest, Undisturbed());
}

TEST_F(Fault, MalformedFaultSpecIsAClearError) {
  const CommandResult r = RunPsformer(std::string("train ") + kJob + " --run-dir " + dir_.File("bad") +
                                      " --set fault.kill=server:0@20:explode");
  EXPECT_NE(r.exit_status, 0);
  EXPECT_TRUE(Has(r.output, "names action 'explode'; expected kill, checkpoint, push, shm or stall=MS")) << r.output;
}

}  // namespace
}  // namespace psformer::testing
