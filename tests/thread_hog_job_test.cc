// A job run while another process holds most of the machine's threads (docs/failure-model.md: a
// `translate --threads 100000` beside a job once made every server die of SIGABRT, "terminate
// called without an active exception", five restarts in eight seconds, and the job fail with
// that line alone).
//
// The machine is made small instead of full: the test puts a shell into a cgroup of its own
// whose pids controller allows kTasks tasks (threads count), starts a hog there that holds all
// of them but `free`, and trains the fault tests' small job beside it. The rest of the machine
// (another build, other tests) never notices. The hog ends by itself after its hold (at most
// kLongestHoldSeconds), the job runs under `timeout`, and the cgroup is removed on every way out
// of the script, so nothing outlives the test; cgroups of earlier runs that were cut off are
// removed when empty. Needs root and a writable cgroup v1 pids hierarchy or cgroup v2 with the
// pids controller; skipped with the reason elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/fault_job_util.h"
#include "tests/test_util.h"

namespace psformer::testing {
namespace {

constexpr int kTasks = 1000;              // the cgroup's pids.max: the "machine" the job shares
constexpr int kLongestHoldSeconds = 240;  // under the test's time limit
constexpr int kJobSeconds = 250;          // `timeout` on the job, under the test's time limit
// Tasks left free beside the hog: enough for the supervisor (OpenBLAS starts a thread per core
// but one in every psformer process as it loads, and dies without them) and its forks, too few
// for the roles' threads (the job runs 33 tasks at its peak on 2 cores, more on more cores).
int TightTasks() { return static_cast<int>(std::max(2u, std::thread::hardware_concurrency())) + 10; }

// The hog: `python3 - COUNT HOLD READY` starts COUNT threads that sleep HOLD seconds (small
// stacks, so that memory is not what runs out), writes READY, and ends when they do.
constexpr char kHog[] = R"(
import sys, threading, time
count, hold, ready = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
threading.stack_size(64 * 1024)
done = threading.Event()
held = []
for _ in range(count):
    t = threading.Thread(target=done.wait, args=(hold,), daemon=True)
    t.start()
    held.append(t)
open(ready, "w").write(str(len(held)))
time.sleep(hold)
)";

// The pids hierarchy this machine has, or "" (then the test is skipped).
std::string PidsHierarchy() {
  for (const char* dir : {"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    const std::filesystem::path d(dir);
    std::error_code ec;
    if (std::filesystem::exists(d / "pids.max", ec)) continue;  // a leaf, not a hierarchy's root
    const bool v1 = std::string(dir) == "/sys/fs/cgroup/pids" && std::filesystem::exists(d / "cgroup.procs", ec);
    const bool v2 = std::filesystem::exists(d / "cgroup.subtree_control", ec) &&
                    ReadTextFile((d / "cgroup.subtree_control").string()).find("pids") != std::string::npos;
    if (v1 || v2) return dir;
  }
  return "";
}

// Trains kFaultJob into dir/name inside a cgroup of kTasks tasks, beside a hog that holds all
// but `free` of them for `hold_seconds`. The result is the job's (exit 90: no cgroup could be
// made; 91: the hog did not start).
CommandResult TrainBesideAHog(const TempDir& dir, const std::string& name, int free, int hold_seconds) {
  const std::string hog = dir.Write("hog.py", kHog);
  const std::string script = dir.Write("beside-a-hog.sh", R"sh(
set -u
hierarchy=$1 tasks=$2 free=$3 hold=$4 hog=$5 ready=$6 psformer=$7 run=$8 most=$9
shift 9
# Cgroups an earlier run left; not those of a run still going (ctest -j runs these tests side by
# side: one's sweep once removed another's emptied cgroup before its own cleanup could).
for old in "$hierarchy"/psformer-thread-hog-*; do
  [ -d "$old" ] && ! kill -0 "${old##*-}" 2>/dev/null && rmdir "$old" 2>/dev/null
done
cg=$hierarchy/psformer-thread-hog-$$
mkdir "$cg" || exit 90
hog_pid=
cleanup() {
  [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null && wait "$hog_pid" 2>/dev/null
  echo $$ > "$hierarchy/cgroup.procs"
  rmdir "$cg" || echo "cannot remove $cg"
}
trap cleanup EXIT
echo "$tasks" > "$cg/pids.max" || exit 90
echo $$ > "$cg/cgroup.procs" || exit 90
read -r current < "$cg/pids.current"
# The hog's own main thread and the job's `timeout` are tasks too.
python3 - "$((tasks - current - 2 - free))" "$hold" "$ready" < "$hog" &
hog_pid=$!
until [ -s "$ready" ]; do kill -0 "$hog_pid" 2>/dev/null || exit 91; sleep 0.05; done
read -r held < "$ready"
echo "the hog holds $held threads; $(( tasks - $(cat "$cg/pids.current") )) of $tasks tasks are free"
timeout -k 10 "$most" "$psformer" train "$@" --run-dir "$run"
)sh");
  return RunShell("cd " + SourceDir() + " && bash " + script + " " + PidsHierarchy() + " " + std::to_string(kTasks) +
                  " " + std::to_string(free) + " " + std::to_string(hold_seconds) + " " + hog + " " +
                  dir.File(name + ".ready") + " " + PsformerBinary() + " " + dir.File(name) + " " +
                  std::to_string(kJobSeconds) + " " + kFaultJob);
}

// Skips the test where no cgroup can be made, saying why.
#define SKIP_WITHOUT_A_PIDS_CGROUP()                                                                    \
  do {                                                                                                  \
    if (PidsHierarchy().empty()) GTEST_SKIP() << "no writable pids cgroup hierarchy here (needs root)"; \
  } while (0)

// Threads of the job's supervisor and roles that the sentence naming the cause may come from.
bool NamesTheCause(const std::string& output) {
  return HasText(output, "cannot start a thread") || HasText(output, "short of threads or memory") ||
         HasText(output, "could not get a thread or memory");
}

// A hog that lets go after a few seconds: the roles it starved said so, their supervisor waited
// for the machine instead of spending restarts, and the job ends with the undisturbed weights.
TEST(ThreadHog, AJobBesideAHogThatLetsGoFinishesWithTheUndisturbedWeights) {
  SKIP_WITHOUT_A_PIDS_CGROUP();
  TempDir dir;
  const FaultJobOutcome calm = TrainFaultJob(dir, "calm", "");
  ASSERT_FALSE(calm.digest.empty());
  const CommandResult r = TrainBesideAHog(dir, "beside", /*free=*/TightTasks(), /*hold_seconds=*/6);
  if (r.exit_status == 90) GTEST_SKIP() << "cannot make a cgroup here: " << r.output;
  ASSERT_NE(r.exit_status, 91) << "the hog did not start: " << r.output;
  EXPECT_FALSE(HasText(r.output, "terminate called")) << r.output;
  EXPECT_FALSE(HasText(r.output, "cannot remove")) << r.output;
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(NamesTheCause(r.output)) << "the hog left the job enough threads: it tested nothing\n" << r.output;
  EXPECT_EQ(ModelDigest(dir.File("beside") + "/model.bin"), calm.digest);
}

// A hog that holds on: the job ends, not hangs, with a message naming the cause and how to
// continue, after its supervisor waited for the machine (2 s doubling to 30 s, six times).
TEST(ThreadHog, AJobBesideAHogThatHoldsOnFailsNamingTheCause) {
  SKIP_WITHOUT_A_PIDS_CGROUP();
  TempDir dir;
  const CommandResult r = TrainBesideAHog(dir, "starved", /*free=*/TightTasks(), kLongestHoldSeconds);
  if (r.exit_status == 90) GTEST_SKIP() << "cannot make a cgroup here: " << r.output;
  ASSERT_NE(r.exit_status, 91) << "the hog did not start: " << r.output;
  EXPECT_NE(r.exit_status, 124) << "the job was still running after " << kJobSeconds << " s\n" << r.output;
  EXPECT_FALSE(HasText(r.output, "terminate called")) << r.output;
  EXPECT_FALSE(HasText(r.output, "cannot remove")) << r.output;
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_TRUE(HasText(r.output, "could not get a thread or memory")) << r.output;
  EXPECT_TRUE(HasText(r.output, "cannot start a thread")) << r.output;
  EXPECT_TRUE(HasText(r.output, "--resume")) << r.output;
}

}  // namespace
}  // namespace psformer::testing
