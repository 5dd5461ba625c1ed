// Same-host shared memory in whole training jobs: a single-node `psformer train` moves its
// payloads through shared memory by default, ends with the weights of the same job over TCP
// (cluster.same_host_shm = false), bitwise, and leaves nothing of the job in /dev/shm, whether
// it ended cleanly or its worker and server were SIGKILLed on the way (the supervisor removes a
// killed child's segments).
//
// Faults on that path: a worker killed while a server reads its gradient in place out of the
// worker's segment (the copy halfway through which a worker dies where its payload is copied is
// tested in shm_van_test), a server killed while a worker reads its reply out of the server's
// segment, and plain restarts.
// Each run ends by itself with the undisturbed weights, bitwise; the restarted role comes back on
// segments of its own (named by its new pid) while the supervisor removed those of the killed
// pid; and /dev/shm holds nothing of the job afterwards.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
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

// Every match of `pattern`'s group `group` (the first by default) in `logs`.
std::vector<std::string> All(const std::string& logs, const std::string& pattern, int group = 1) {
  std::vector<std::string> found;
  const std::regex re(pattern);
  for (std::sregex_iterator it(logs.begin(), logs.end(), re), end; it != end; ++it) found.push_back((*it)[group]);
  return found;
}

// The job's segment prefix as the supervisor logged it ("/psformer-<hex>-"), "" if not logged.
std::string JobPrefix(const std::string& logs) {
  const auto found = All(logs, "shared memory: /dev/shm(/psformer-[0-9a-f]{16}-)\\*");
  return found.empty() ? "" : found.front();
}

// Segments of the job still in /dev/shm.
std::vector<std::string> Leftovers(const std::string& prefix) {
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = "/";  // appended, not "/" + ...: GCC 12 warns falsely (-Wrestrict) on that
    name += e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) left.push_back(name);
  }
  return left;
}

// Frames the roles sent through shared memory, copied or lent in place, summed over their
// "N payload frame(s) sent through shared memory, M lent in place" lines.
int FramesThroughSharedMemory(const std::string& logs) {
  static const std::regex kLine("(\\d+) payload frame\\(s\\) sent through shared memory, (\\d+) lent in place");
  int total = 0;
  for (std::sregex_iterator it(logs.begin(), logs.end(), kLine), end; it != end; ++it) {
    total += std::stoi((*it)[1]) + std::stoi((*it)[2]);
  }
  return total;
}

// `role` (e.g. "worker-1") was killed and came back on shared memory of its own: the killed pid's
// segments were removed, and the pid of its restart made a segment and sent payloads through it.
void ExpectReattached(const std::string& logs, const std::string& role, const std::string& prefix) {
  const auto pids = All(logs, role + ": started pid (\\d+) \\(incarnation");
  ASSERT_EQ(pids.size(), 2u) << role << "\n" << logs;
  EXPECT_TRUE(HasText(logs, role + " killed by signal 9")) << logs;
  const std::regex removed(role + ": removed [1-9]\\d* shared-memory segment\\(s\\) of pid " + pids[0]);
  EXPECT_TRUE(std::regex_search(logs, removed)) << role << "\n" << logs;
  EXPECT_TRUE(HasText(logs, "made shared-memory segment " + prefix + pids[1] + "-")) << role << "\n" << logs;
  // The restart's own log line (its ShmVan's summary when it ends) counts what it sent, copied
  // (a worker's pushes) or lent in place (a server's snapshot).
  const std::string summary = role +
                              " shm_van\\.cc:\\d+\\] transport: (\\d+) payload frame\\(s\\) sent through "
                              "shared memory, (\\d+) lent";
  const auto copied = All(logs, summary), lent = All(logs, summary, 2);
  ASSERT_FALSE(copied.empty()) << logs;
  EXPECT_GT(std::stoi(copied.back()) + std::stoi(lent.back()), 0) << logs;
}

TEST(ShmJob, CleanAndKilledRunsUseSharedMemoryLeaveNothingAndMatchTcp) {
  TempDir dir;
  const Outcome tcp = Train(dir, "tcp", "--set cluster.same_host_shm=false");
  EXPECT_EQ(FramesThroughSharedMemory(tcp.logs), 0) << tcp.logs;
  EXPECT_EQ(JobPrefix(tcp.logs), "");
  ASSERT_FALSE(tcp.digest.empty());

  const Outcome shm = Train(dir, "shm", "");
  EXPECT_EQ(shm.digest, tcp.digest);
  EXPECT_GT(FramesThroughSharedMemory(shm.logs), 0) << shm.logs;
  EXPECT_TRUE(HasText(shm.logs, "/ipc/pserver-0.sock")) << shm.logs;
  const std::string prefix = JobPrefix(shm.logs);
  ASSERT_FALSE(prefix.empty()) << shm.logs;
  EXPECT_TRUE(Leftovers(prefix).empty());
  EXPECT_FALSE(std::filesystem::exists(dir.File("shm") + "/ipc")) << "the servers' sockets are left in the run";

  const Outcome killed = Train(dir, "killed", "--set fault.kill=worker:1@15,server:1@25");
  EXPECT_EQ(killed.digest, tcp.digest);
  EXPECT_GT(FramesThroughSharedMemory(killed.logs), 0);
  const std::string killed_prefix = JobPrefix(killed.logs);
  ASSERT_FALSE(killed_prefix.empty());
  EXPECT_TRUE(Leftovers(killed_prefix).empty());
  EXPECT_FALSE(std::filesystem::exists(dir.File("killed") + "/ipc"));
  ExpectReattached(killed.logs, "worker-1", killed_prefix);
  ExpectReattached(killed.logs, "pserver-1", killed_prefix);
}

struct ShmFaultCase {
  const char* flags;
  std::vector<const char*> killed;  // roles killed once, each restarted
  std::vector<const char*> logged;
};

TEST(ShmFault, KilledInTheCopyOrWhileAReplyIsReadEndsWithTheUndisturbedWeightsAndLeavesNothing) {
  TempDir dir;
  const Outcome calm = Train(dir, "calm", "");
  ASSERT_FALSE(calm.digest.empty());
  EXPECT_FALSE(HasText(calm.logs, "fault injection")) << calm.logs;

  const ShmFaultCase cases[] = {
      // The gradient lies in memory the worker lends in place: it dies while a server reads the
      // first piece of step 15 out of its segment, which the server's mapping keeps readable.
      {"--set fault.kill=worker:1@15:shm",
       {"worker-1"},
       {"while a receiver reads my push of step 15 in place", "rejoining at step 15"}},
      // Without overlap the push of step 15 goes out after the whole step is computed.
      {"--set fault.kill=worker:0@15:shm --set cluster.overlap=false",
       {"worker-0"},
       {"while a receiver reads my push of step 15 in place", "rejoining at step 15"}},
      // The worker reading holds the mapping, which outlives the unlink; the job rolls back.
      {"--set fault.kill=server:0@25:shm",
       {"pserver-0"},
       {"while a receiver reads my reply from shared memory (sent after step 25)", "the job rolls back to step 20"}},
  };
  int run = 0;
  for (const ShmFaultCase& c : cases) {
    SCOPED_TRACE(c.flags);
    const Outcome faulty = Train(dir, "faulty-" + std::to_string(run++), c.flags);
    for (const char* line : c.logged) EXPECT_TRUE(HasText(faulty.logs, line)) << line << "\n" << faulty.logs;
    const std::string prefix = JobPrefix(faulty.logs);
    ASSERT_FALSE(prefix.empty()) << faulty.logs;
    for (const char* role : c.killed) ExpectReattached(faulty.logs, role, prefix);
    EXPECT_EQ(faulty.digest, calm.digest);
    EXPECT_EQ(Leftovers(prefix), std::vector<std::string>());
  }
}

// A KILL_IN_SHM that finds no payload to strike in (a CPU worker's bf16 gradient of this small
// model travels in frames under the shared-memory threshold) says so; the job ends as without it.
TEST(ShmFault, AFaultThatNeverStrikesSaysSo) {
  TempDir dir;
  const Outcome run = Train(dir, "unstruck", "--set fault.kill=worker:1@15:shm --set cluster.gradient_dtype=BF16");
  EXPECT_FALSE(run.digest.empty());
  EXPECT_FALSE(HasText(run.logs, "killing myself")) << run.logs;
  EXPECT_TRUE(HasText(run.logs, "worker-1 shm_van.cc")) << run.logs;
  EXPECT_TRUE(HasText(run.logs, "the KILL_IN_SHM of step 15 never struck")) << run.logs;
}

// Trains the job in a PID namespace of its own (unshare) with server 0 killed at step 25, and
// makes the kernel give its restart the killed server's pid: from the kill until the restart, the
// script writes that pid - 1 to ns_last_pid, with shell builtins only (a fork would take the pid).
// Returns the command's result; the run's logs are in dir/name.
CommandResult TrainWithThePidReused(const TempDir& dir, const std::string& name) {
  const std::string script = dir.Write("reuse-pid.sh", R"(
psformer=$1 run=$2
shift 2
"$psformer" train "$@" --run-dir "$run" &
job=$!
log=$run/logs/supervisor.log
pid=
until [ -n "$pid" ] || ! kill -0 $job 2>/dev/null; do
  sleep 0.05
  pid=$(sed -n 's/.*pserver-0: started pid \([0-9]*\) (incarnation 0).*/\1/p' "$log" 2>/dev/null)
done
until grep -q "pserver-0 killed by signal 9" "$log" 2>/dev/null || ! kill -0 $job 2>/dev/null; do sleep 0.02; done
end=$((SECONDS + 4))
while ((SECONDS < end)); do echo $((pid - 1)) > /proc/sys/kernel/ns_last_pid; done
wait $job
)");
  return RunShell("cd " + SourceDir() + " && unshare --pid --fork --mount-proc bash " + script + " " +
                  PsformerBinary() + " " + dir.File(name) + " " + kJob +
                  " --set fault.kill=server:0@25 --set cluster.restart_backoff_ms=2000");
}

// A restarted server that the kernel gives its predecessor's pid (ordinary on a busy host; it
// hung a job for good when segments were named by pid alone: the workers, still holding the old
// mappings, refused every reply) ends with the undisturbed weights and leaves nothing in /dev/shm.
TEST(ShmFault, ARestartedServerWithItsPredecessorsPidEndsWithTheUndisturbedWeights) {
  TempDir dir;
  if (RunShell("unshare --pid --fork true").exit_status != 0) GTEST_SKIP() << "cannot make a PID namespace here";
  const Outcome calm = Train(dir, "calm", "");
  ASSERT_FALSE(calm.digest.empty());
  // The kernel may still give the restart another pid (a thread started in the window takes it):
  // a few tries, each a whole job.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string name = "reused-" + std::to_string(attempt);
    const CommandResult r = TrainWithThePidReused(dir, name);
    ASSERT_EQ(r.exit_status, 0) << r.output;
    const std::string logs = ReadRunLogs(dir.File(name));
    const auto pids = All(logs, "pserver-0: started pid (\\d+) \\(incarnation");
    ASSERT_EQ(pids.size(), 2u) << logs;
    if (pids[0] != pids[1]) continue;
    // Names that cannot collide: no segment name of the killed server comes back with its
    // restart (with names of the pid alone it did, and the workers refused its replies).
    const auto made = All(logs, "pserver-0 shm_van\\.cc:\\d+\\] transport: made shared-memory segment (\\S+)");
    EXPECT_EQ(std::set<std::string>(made.begin(), made.end()).size(), made.size()) << logs;
    EXPECT_EQ(ModelDigest(dir.File(name) + "/model.bin"), calm.digest);
    const std::string prefix = JobPrefix(logs);
    ASSERT_FALSE(prefix.empty()) << logs;
    EXPECT_EQ(Leftovers(prefix), std::vector<std::string>());
    return;
  }
  GTEST_SKIP() << "the kernel gave the restarted server another pid in each of 3 tries";
}

TEST(ShmFault, SharedMemoryFaultWithoutSharedMemoryIsAClearError) {
  TempDir dir;
  const CommandResult r = RunPsformer(std::string("train ") + kJob + " --run-dir " + dir.File("bad") +
                                      " --set fault.kill=worker:0@5:shm --set cluster.same_host_shm=false");
  EXPECT_NE(r.exit_status, 0);
  EXPECT_TRUE(HasText(r.output, "fault.kill (worker:0@5:shm).action")) << r.output;
  EXPECT_TRUE(HasText(r.output, "needs cluster.same_host_shm = true")) << r.output;
}

}  // namespace
}  // namespace psformer::testing
