// Host summing in whole jobs (label `fault`): the fault job of four workers summed in host groups
// [2, 2] by two `psformer aggregator` processes. A single-node job and an mpirun job of the same
// grouping end bitwise equal; groups of one worker end as the flat path does; the aggregator
// killed mid-step, stalled, or killed with a server, and lost messages, all end with the
// undisturbed weights, and the logs show each fault happened; a resume with another grouping is
// refused before anything starts.
#include <gtest/gtest.h>

#include <string>

#include "tests/fault_job_util.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::FaultJobOutcome;
using testing::ModelDigest;
using testing::RunPsformer;
using testing::TempDir;
using testing::TrainFaultJob;

const std::string kFourWorkers = " --set cluster.workers=4";
const std::string kGroups = kFourWorkers + " --set cluster.host_groups=2,2";

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

class HostSummingJob : public ::testing::Test {
 protected:
  // The undisturbed grouped run every other grouped run must reproduce.
  std::string Undisturbed() {
    const FaultJobOutcome calm = TrainFaultJob(dir_, "calm", kGroups);
    EXPECT_FALSE(calm.digest.empty());
    EXPECT_TRUE(Has(calm.logs, "summed in host groups [2, 2]")) << calm.logs;
    EXPECT_TRUE(Has(calm.logs, "aggregator of host group 1 stops; sums sent: ")) << calm.logs;
    return calm.digest;
  }
  TempDir dir_;
};

TEST_F(HostSummingJob, MpirunRanksAndOneNodeOfTheSameGroupingEndBitwiseEqual) {
  const std::string grouped = Undisturbed();
  // 2 servers + 4 workers, one a rank; the aggregators run beside workers 0 and 2.
  const std::string run = dir_.File("mpirun");
  const CommandResult r =
      testing::RunPsformerUnderMpirun(6, std::string("train ") + testing::kFaultJob + kGroups + " --run-dir " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::string logs = testing::ReadRunLogs(run);
  EXPECT_TRUE(Has(logs, "and aggregator-0, which sums the host group's gradients")) << logs;
  EXPECT_TRUE(Has(logs, "and aggregator-1, which sums the host group's gradients")) << logs;
  EXPECT_EQ(ModelDigest(run + "/model.bin"), grouped);
  // The grouping decides the bits: the flat path adds the four gradients in another order...
  const FaultJobOutcome flat = TrainFaultJob(dir_, "flat", kFourWorkers);
  EXPECT_NE(flat.digest, grouped);
  // ...which groups of one worker each reproduce.
  const FaultJobOutcome ones = TrainFaultJob(dir_, "ones", kFourWorkers + " --set cluster.host_groups=1,1,1,1");
  EXPECT_TRUE(Has(ones.logs, "aggregator of host group 3 stops")) << ones.logs;
  EXPECT_EQ(ones.digest, flat.digest);
}

// How pieces are cut and how bytes travel changes no bit of a grouped job: whole shards instead of
// pieces (no overlap), contiguous shards, TCP instead of shared memory, three connections a pair.
TEST_F(HostSummingJob, PiecesAndTransportsChangeNoBit) {
  const std::string grouped = Undisturbed();
  int variant = 0;
  for (const char* flags : {" --set cluster.overlap=false", " --set cluster.spread_layers=false",
                            " --set cluster.same_host_shm=false --set cluster.streams=3"}) {
    const FaultJobOutcome run = TrainFaultJob(dir_, "variant" + std::to_string(variant++), kGroups + flags);
    EXPECT_EQ(run.digest, grouped) << flags;
  }
}

// The embedding's gradient in two parts (cluster.split_embedding) through the aggregators: a
// grouped job keeps its bits through a killed aggregator and a killed server (a rollback into a
// new recovery epoch), and groups of one worker each reproduce the flat split job.
TEST_F(HostSummingJob, SplitEmbeddingGroupedJobsKeepTheirBitsThroughFaults) {
  const std::string split = " --set cluster.split_embedding=true";
  const FaultJobOutcome calm = TrainFaultJob(dir_, "split", kGroups + split);
  ASSERT_FALSE(calm.digest.empty());
  const FaultJobOutcome faults =
      TrainFaultJob(dir_, "split-faults", kGroups + split + " --set fault.kill=aggregator:0@15,server:1@25");
  EXPECT_TRUE(Has(faults.logs, "aggregator-0 killed by signal 9")) << faults.logs;
  EXPECT_TRUE(Has(faults.logs, "the job rolls back to step 20")) << faults.logs;
  EXPECT_EQ(faults.digest, calm.digest);
  const FaultJobOutcome flat = TrainFaultJob(dir_, "split-flat", kFourWorkers + split);
  const FaultJobOutcome ones =
      TrainFaultJob(dir_, "split-ones", kFourWorkers + split + " --set cluster.host_groups=1,1,1,1");
  EXPECT_EQ(ones.digest, flat.digest);
  EXPECT_NE(flat.digest, calm.digest);
}

struct SummingFault {
  const char* name;
  const char* flags;
  std::vector<const char*> logged;
};

const SummingFault kSummingFaults[] = {
    // Half of step 15's sums are with the servers, the rest of the shares are lost with it.
    {"AggregatorKilledMidStep",
     " --set fault.kill=aggregator:0@15",
     {"aggregator-0 killed by signal 9", "aggregator-0: started pid"}},
    {"AggregatorAndServerKilled",
     " --set fault.kill=aggregator:1@12,server:0@25",
     {"aggregator-1 killed by signal 9", "the job rolls back to step 20",
      "aggregator of host group 0: the job rolled back (recovery epoch 1)"}},
    {"WorkerKilledHalfwayThroughItsPushToTheAggregator",
     " --set fault.kill=worker:3@15:push",
     {"worker-3 killed by signal 9", "rejoining at step 15"}},
    {"StalledAggregatorIsKilledByItsSupervisor",
     " --set fault.kill=aggregator:1@15:stall=20000 --set cluster.heartbeat_timeout_ms=1500",
     {"aggregator-1: no heartbeat for 1500 ms"}},
    {"LostMessages", " --set fault.drop_fraction=0.03 --set cluster.retry_ms=150", {"sending it again"}},
};

class SummingFaultRun : public HostSummingJob, public ::testing::WithParamInterface<SummingFault> {};

TEST_P(SummingFaultRun, EndsWithTheUndisturbedWeights) {
  const SummingFault& c = GetParam();
  const std::string calm = Undisturbed();
  const FaultJobOutcome run = TrainFaultJob(dir_, "faulty", kGroups + c.flags);
  for (const char* line : c.logged) EXPECT_TRUE(Has(run.logs, line)) << line << "\n" << run.logs;
  EXPECT_EQ(run.digest, calm);
}

INSTANTIATE_TEST_SUITE_P(Faults, SummingFaultRun, ::testing::ValuesIn(kSummingFaults),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(HostSummingJob, AResumeWithAnotherGroupingIsRefusedAtOnce) {
  const std::string run = dir_.File("run");
  const std::string job = std::string("train ") + testing::kFaultJob + kFourWorkers + " --run-dir " + run;
  ASSERT_EQ(RunPsformer(job + " --set cluster.host_groups=2,2 --set training.max_steps=20").exit_status, 0);
  const CommandResult other = RunPsformer(job + " --set cluster.host_groups=1,3 --resume");
  EXPECT_EQ(other.exit_status, 1) << other.output;
  EXPECT_TRUE(Has(other.output, "cluster.host_groups: the run has [2, 2], this config [1, 3]")) << other.output;
  // The flat path is another grouping too, named as such by the checkpoint.
  const CommandResult flat = RunPsformer(std::string("train ") + testing::kFaultJob + kFourWorkers +
                                         " --set cluster.host_summing=false --run-dir " + run + " --resume");
  EXPECT_NE(flat.exit_status, 0) << flat.output;
  EXPECT_TRUE(Has(flat.output, "cluster.host_summing")) << flat.output;
}

TEST_F(HostSummingJob, GroupingsThatCannotSumAreRefusedWithTheirField) {
  const std::string base = std::string("train ") + testing::kFaultJob + kFourWorkers + " --run-dir " + dir_.File("r");
  testing::ExpectRefusedVariants(
      base, "", 1,
      {
          {" --set cluster.host_groups=2,1", "adds up to 3 workers, but cluster.workers = 4"},
          {" --set cluster.host_groups=4,0", "every group needs at least one worker"},
          {" --set cluster.host_groups=2,2 --set cluster.consistency=SSP",
           "host summing needs cluster.consistency = BSP"},
          {" --set cluster.host_groups=2,2 --set cluster.host_summing=false", "while cluster.host_summing = false"},
          {" --set fault.kill=aggregator:2@3 --set cluster.host_groups=2,2", "no such host group"},
      });
  // A value that is not a list of counts is a mistake of the command line (exit 2).
  testing::ExpectRefusedVariants(base, "", 2,
                                 {{" --set cluster.host_groups=2,x", "is not a valid value for cluster.host_groups"}});
}

}  // namespace
}  // namespace psformer
