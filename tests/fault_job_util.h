// The small job the fault tests run end to end (tests/fault_test.cc, tests/shm_job_test.cc):
// two workers, two servers, a checkpoint every 10 steps, the smallest job where every kind of
// process can die and a server's death forces a rollback; and what a run of it leaves behind.
#ifndef PSFORMER_TESTS_FAULT_JOB_UTIL_H_
#define PSFORMER_TESTS_FAULT_JOB_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "tests/test_util.h"

namespace psformer::testing {

inline constexpr char kFaultJob[] =
    "--config configs/copy.pbtxt --set training.max_steps=40 --set training.valid_every=20 "
    "--set logging.every_steps=10 --set checkpoint.every_steps=10 --set cluster.workers=2 "
    "--set cluster.servers=2 --set cluster.retry_ms=300";

struct FaultJobOutcome {
  std::string digest;  // of model.bin
  std::string logs;    // every log of the run directory
};

// Trains kFaultJob (plus `extra` flags) in dir/name; expects exit status 0.
inline FaultJobOutcome TrainFaultJob(const TempDir& dir, const std::string& name, const std::string& extra) {
  const std::string run = dir.File(name);
  const CommandResult r = RunPsformer(std::string("train ") + kFaultJob + " --run-dir " + run + " " + extra);
  EXPECT_EQ(r.exit_status, 0) << r.output;
  return {ModelDigest(run + "/model.bin"), ReadRunLogs(run)};
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_FAULT_JOB_UTIL_H_
