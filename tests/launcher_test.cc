// Supervision of role processes: restarts, give-up, hang detection. The "role processes" here
// are small shell scripts, so the behaviour is checked without the rest of the system.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/heartbeat.h"
#include "common/parallel_for.h"
#include "common/supervisor_report.h"
#include "launcher/resource_failure.h"
#include "launcher/role_process.h"
#include "tests/test_util.h"
#include "worker/backend/thread_pool.h"

namespace psformer {
namespace {

using testing::TempDir;

// Runs `script` under /bin/sh; the script sees its incarnation as $2.
RoleProcessOptions ShellRole(const TempDir& dir, const std::string& script) {
  RoleProcessOptions o;
  o.name = "test-role";
  o.executable = "/bin/sh";
  o.args = {"-c", script, "role"};
  o.log_file = dir.File("role.log");
  o.heartbeat_timeout_ms = 0;
  o.max_restarts = 3;
  o.restart_backoff_ms = 10;
  return o;
}

RoleProcess::State RunToEnd(RoleProcess* role, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto state = role->Poll();
    if (state == RoleProcess::State::kSucceeded || state == RoleProcess::State::kFailed) return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return role->state();
}

TEST(RoleProcess, RestartsAfterAFailedExitWithTheNextIncarnation) {
  TempDir dir;
  // Fails in incarnations 0 and 1, succeeds in 2; records each incarnation it saw.
  RoleProcess role(ShellRole(dir, "echo $2 >> " + dir.File("seen") + "; [ $2 -ge 2 ]"));
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded);
  EXPECT_EQ(role.incarnation(), 2);
  std::ifstream seen(dir.File("seen"));
  std::string all((std::istreambuf_iterator<char>(seen)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "0\n1\n2\n");
}

TEST(RoleProcess, GivesUpAfterMaxRestartsAndSaysWhy) {
  TempDir dir;
  RoleProcess role(ShellRole(dir, "exit 3"));
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kFailed);
  EXPECT_EQ(role.restarts(), 3);
  EXPECT_NE(role.failure().find("exited with status 3"), std::string::npos) << role.failure();
  EXPECT_NE(role.failure().find("max_restarts = 3"), std::string::npos) << role.failure();
}

TEST(RoleProcess, RestartsAProcessKilledBySigkill) {
  TempDir dir;
  // Incarnation 0 sleeps until killed; incarnation 1 succeeds.
  RoleProcess role(ShellRole(dir, "[ $2 -ge 1 ] && exit 0; sleep 30"));
  ASSERT_TRUE(role.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  role.Signal(SIGKILL);
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded);
  EXPECT_EQ(role.incarnation(), 1);
}

TEST(RoleProcess, KillsAndRestartsAHungProcess) {
  TempDir dir;
  auto options = ShellRole(dir, "[ $2 -ge 1 ] && exit 0; sleep 30");  // never beats
  options.heartbeat_timeout_ms = 300;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded);
  EXPECT_EQ(role.incarnation(), 1);
}

TEST(RoleProcess, HeartbeatsKeepASlowProcessAlive) {
  TempDir dir;
  // Beats every 50 ms on the inherited descriptor for ~1 s, far past the 300 ms timeout.
  auto options = ShellRole(dir,
                           "i=0; while [ $i -lt 20 ]; do printf x >&$PSFORMER_HEARTBEAT_FD; sleep 0.05; "
                           "i=$((i+1)); done");
  options.heartbeat_timeout_ms = 300;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded);
  EXPECT_EQ(role.incarnation(), 0);
}

TEST(RoleProcess, MissingExecutableFailsEveryIncarnation) {
  TempDir dir;
  RoleProcessOptions options = ShellRole(dir, "");
  options.executable = "/nonexistent/psformer";
  options.max_restarts = 1;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kFailed);
  EXPECT_NE(role.failure().find("exited with status 127"), std::string::npos) << role.failure();
}

TEST(RoleProcess, AStartUpFailureRepeatedTheSameWayIsNotRestartedAgain) {
  TempDir dir;
  // Never reports ready: it fails while starting up, each time alike.
  auto options = ShellRole(dir, "echo 'error: cannot allocate 1.2 TiB'; exit 1");
  options.reports_ready = true;
  options.max_restarts = 5;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kFailed);
  EXPECT_EQ(role.restarts(), 1);
  EXPECT_NE(role.failure().find("twice in a row the same way"), std::string::npos) << role.failure();
  EXPECT_NE(role.failure().find("error: cannot allocate 1.2 TiB"), std::string::npos) << role.failure();
}

TEST(RoleProcess, AFailureAfterStartUpIsRestartedAsBefore) {
  TempDir dir;
  // Ready, then fails the same way in every incarnation: a failure of running, restarted.
  auto options = ShellRole(dir, "printf 'ready\\n' >&$PSFORMER_HEARTBEAT_FD; exit 3");
  options.reports_ready = true;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kFailed);
  EXPECT_EQ(role.restarts(), 3);
  EXPECT_NE(role.failure().find("max_restarts = 3"), std::string::npos) << role.failure();
}

// A role that exits by itself said why last (an aggregator whose request no server answered);
// the restart line, which reaches the console and TensorBoard, carries it. A killed role's last
// line is not why it died and is left out.
TEST(RoleProcess, ARestartOfARoleThatExitedSaysItsLastLine) {
  TempDir dir;
  auto options = ShellRole(dir,
                           "[ $2 -ge 1 ] && exit 0; echo 'psformer aggregator: error: no answer to PULL of step "
                           "7 (piece 3) from shard 1 (pserver-1) within 600000 ms'; exit 1");
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded) << role.failure();
  std::vector<std::string> said = role.TakeRestarts();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("test-role exited with status 1 (psformer aggregator: error: no answer to PULL of step 7 "
                         "(piece 3) from shard 1 (pserver-1) within 600000 ms); restarting as incarnation 1"),
            std::string::npos)
      << said[0];

  TempDir killed_dir;
  RoleProcess killed(ShellRole(killed_dir, "[ $2 -ge 1 ] && exit 0; echo 'an ordinary line'; kill -9 $$"));
  ASSERT_TRUE(killed.Start().ok());
  EXPECT_EQ(RunToEnd(&killed), RoleProcess::State::kSucceeded) << killed.failure();
  said = killed.TakeRestarts();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("test-role killed by signal 9 (Killed); restarting as incarnation 1"), std::string::npos)
      << said[0];
}

TEST(RoleProcess, DifferentStartUpFailuresAreRestarted) {
  TempDir dir;
  // Each incarnation fails before ready, but never twice alike (the cause is not fixed).
  auto options = ShellRole(dir, "echo \"attempt $2\"; [ $2 -ge 2 ]");
  options.reports_ready = true;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded);
  EXPECT_EQ(role.incarnation(), 2);
}

TEST(RoleProcess, ExitDoNotRestartEndsTheRoleWithItsFatalReport) {
  TempDir dir;
  auto options = ShellRole(dir, "printf 'ready\\nfatal the disk is full\\n' >&$PSFORMER_HEARTBEAT_FD; exit 78");
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kFailed);
  EXPECT_EQ(role.restarts(), 0);
  EXPECT_NE(role.failure().find("the disk is full"), std::string::npos) << role.failure();
  EXPECT_NE(role.failure().find("not restarted"), std::string::npos) << role.failure();
}

// A role the machine refused a thread or memory (exit kExitOutOfResources) is waited for, not
// restarted at once: the waits do not spend cluster.max_restarts (0 here), each says why, and a
// role that gets its resources in the end finishes.
TEST(RoleProcess, ARoleShortOfThreadsIsWaitedForWithoutSpendingItsRestarts) {
  TempDir dir;
  auto options = ShellRole(dir, "echo $2 >> " + dir.File("seen") +
                                    "; [ $2 -ge 2 ] && exit 0; echo 'psformer worker: error: cannot start a thread "
                                    "(Resource temporarily unavailable)'; exit 75");
  options.max_restarts = 0;
  options.resource_wait_ms = 20;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded) << role.failure();
  EXPECT_EQ(role.incarnation(), 2);
  const std::vector<std::string> said = role.TakeRestarts();
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("test-role is short of threads or memory (psformer worker: error: cannot start a thread"),
            std::string::npos)
      << said[0];
  EXPECT_NE(said[0].find("waiting 20 ms"), std::string::npos) << said[0];
  EXPECT_NE(said[1].find("waiting 40 ms"), std::string::npos) << said[1];
  EXPECT_NE(said[1].find("not counted in cluster.max_restarts"), std::string::npos) << said[1];
}

// ZeroMQ cannot start its I/O thread: it prints the reason with its own file and line and aborts
// (no exception reaches psformer's handler); OpenBLAS likewise raises SIGINT. Both were seen
// beside a thread hog (thread_hog_job_test). A machine short of threads, then: waited for,
// not counted against max_restarts (0 here), and not taken for a start-up failure repeated "the
// same way", which once ended the job as "a configuration error". Any other abort is a crash.
TEST(RoleProcess, ALibraryThatEndsTheRoleForWantOfAThreadIsWaitedForAsAShortMachine) {
  TempDir dir;
  auto options = ShellRole(dir,
                           "[ $2 -ge 2 ] && exit 0; echo 'Resource temporarily unavailable (src/thread.cpp:269)'; "
                           "kill -ABRT $$");
  options.max_restarts = 0;
  options.reports_ready = true;
  options.resource_wait_ms = 20;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded) << role.failure();
  const std::vector<std::string> said = role.TakeRestarts();
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("test-role is short of threads or memory (killed by signal 6 (Aborted): cannot start a "
                         "thread (ZeroMQ: Resource temporarily unavailable (src/thread.cpp:269))"),
            std::string::npos)
      << said[0];

  // OpenBLAS, whose threads start as it is loaded, says why and raises SIGINT (exits 1 where
  // SIGINT is ignored).
  TempDir blas_dir;
  auto blas =
      ShellRole(blas_dir,
                "[ $2 -ge 1 ] && exit 0; echo 'OpenBLAS blas_thread_init: pthread_create failed for thread 1 of "
                "2: Resource temporarily unavailable'; echo 'OpenBLAS blas_thread_init: RLIMIT_NPROC 96365 "
                "current, 96365 max'; kill -INT $$; exit 1");
  blas.max_restarts = 0;
  blas.resource_wait_ms = 20;
  RoleProcess blas_role(blas);
  ASSERT_TRUE(blas_role.Start().ok());
  EXPECT_EQ(RunToEnd(&blas_role), RoleProcess::State::kSucceeded) << blas_role.failure();
  const std::vector<std::string> blas_said = blas_role.TakeRestarts();
  ASSERT_EQ(blas_said.size(), 1u);
  EXPECT_NE(blas_said[0].find("cannot start a thread (OpenBLAS, while loading: pthread_create failed for thread 1 of "
                              "2: Resource temporarily unavailable)"),
            std::string::npos)
      << blas_said[0];

  TempDir crash_dir;
  auto crash = ShellRole(crash_dir, "echo 'Assertion failed: a bug (src/other.cpp:1)'; kill -ABRT $$");
  crash.max_restarts = 0;
  RoleProcess crashed(crash);
  ASSERT_TRUE(crashed.Start().ok());
  EXPECT_EQ(RunToEnd(&crashed), RoleProcess::State::kFailed);
  EXPECT_NE(crashed.failure().find("cluster.max_restarts = 0 reached"), std::string::npos) << crashed.failure();
}

// The waits are bounded: a machine that stays short ends the role with the cause named.
TEST(RoleProcess, AMachineThatStaysShortEndsTheRoleAfterItsWaits) {
  TempDir dir;
  auto options = ShellRole(dir, "echo 'cannot allocate memory (std::bad_alloc)'; exit 75");
  options.resource_wait_ms = 5;
  options.max_resource_waits = 3;
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kFailed);
  EXPECT_EQ(role.incarnation(), 3);
  EXPECT_NE(role.failure().find("could not get a thread or memory 4 times in a row"), std::string::npos)
      << role.failure();
  EXPECT_NE(role.failure().find("cannot allocate memory (std::bad_alloc)"), std::string::npos) << role.failure();
  EXPECT_NE(role.failure().find("--resume"), std::string::npos) << role.failure();
}

// Runs `body` on a thread of a child process whose address space may then grow by only `room`
// bytes (RLIMIT_AS, the child's alone: nothing else on the machine is short). Returns its exit
// status and what it wrote to stderr.
std::pair<int, std::string> UnderAddressSpaceLimit(size_t room, const std::function<void()>& body) {
  TempDir dir;
  const std::string err = dir.File("stderr");
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    // The body runs on a thread started before the limit, so that what it does not catch
    // escapes a thread (std::terminate), as in a role, and not into GoogleTest's handler.
    std::atomic<bool> ready{false}, go{false};
    std::thread runner([&] {
      // This thread's malloc arena, made now: small allocations (messages) still succeed later.
      delete[] new char[4096];
      ready.store(true);
      while (!go.load()) std::this_thread::yield();
      body();
    });
    while (!ready.load()) std::this_thread::yield();
    std::ifstream status("/proc/self/status");
    size_t vm_kb = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmSize:", 0) == 0) vm_kb = std::stoull(line.substr(7));
    }
    const rlimit limit{vm_kb * 1024 + room, vm_kb * 1024 + room};
    if (vm_kb == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(99);
    go.store(true);
    runner.join();
    _exit(0);
  }
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);
  std::ifstream in(err);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status), said};
}

// A thread the machine refuses (here: no room in the address space for its stack) is said as
// such with exit status 75, whether the exception is caught (as psformer's commands do) or
// escapes a thread and ends in std::terminate (which printed only "terminate called without an
// active exception" and aborted, a crash to the supervisor, restarted at once).
TEST(ResourceFailure, AThreadTheMachineRefusesIsNamedAndExits75) {
  const auto caught = UnderAddressSpaceLimit(2 << 20, [] {
    try {
      ThreadPool pool(8);  // 8 MB of stack a thread: refused, and the ones started are joined
    } catch (const std::exception& e) {
      std::cerr << OutOfResourcesMessage(e) << std::endl;
      _exit(OutOfResourcesMessage(e).empty() ? 1 : kExitOutOfResources);
    }
  });
  EXPECT_EQ(caught.first, kExitOutOfResources) << caught.second;
  EXPECT_NE(caught.second.find("cannot start a thread (Resource temporarily unavailable"), std::string::npos)
      << caught.second;

  const auto escaped = UnderAddressSpaceLimit(2 << 20, [] {
    InstallTerminateHandler("psformer worker");
    // The helper threads of ParallelFor, refused and not caught: std::terminate.
    ParallelFor(8, 8 << 20, 1 << 20, [](int, size_t, size_t) {});
  });
  EXPECT_EQ(escaped.first, kExitOutOfResources) << escaped.second;
  EXPECT_NE(escaped.second.find("psformer worker: error: cannot start a thread"), std::string::npos) << escaped.second;
  EXPECT_EQ(escaped.second.find("terminate called"), std::string::npos) << escaped.second;

  const auto memory = UnderAddressSpaceLimit(2 << 20, [] {
    InstallTerminateHandler("psformer pserver");
    std::vector<char> big(size_t{1} << 30, 1);  // refused, not caught
    std::cerr << big[12345];
  });
  EXPECT_EQ(memory.first, kExitOutOfResources) << memory.second;
  EXPECT_NE(memory.second.find("psformer pserver: error: cannot allocate memory"), std::string::npos) << memory.second;
}

TEST(RoleProcess, PassesOnCheckpointFailuresBetweenHeartbeats) {
  TempDir dir;
  auto options = ShellRole(dir,
                           "fd=$PSFORMER_HEARTBEAT_FD; printf '\\001' >&$fd; "
                           "printf 'checkpoint-failed step 10: no space\\n' >&$fd; printf '\\001\\001' >&$fd; "
                           "printf 'checkpoint-failed step 20: no space\\n' >&$fd");
  RoleProcess role(options);
  ASSERT_TRUE(role.Start().ok());
  EXPECT_EQ(RunToEnd(&role), RoleProcess::State::kSucceeded);
  const std::vector<std::string> failures = role.TakeCheckpointFailures();
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0], "test-role: step 10: no space");
  EXPECT_EQ(failures[1], "test-role: step 20: no space");
  EXPECT_TRUE(role.TakeCheckpointFailures().empty());
}

TEST(HeartbeatSender, IsInactiveWithoutASupervisor) {
  unsetenv("PSFORMER_HEARTBEAT_FD");
  HeartbeatSender sender(10);
  EXPECT_FALSE(sender.active());
}

}  // namespace
}  // namespace psformer
