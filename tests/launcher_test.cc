// Supervision of role processes: restarts, give-up, hang detection. The "role processes" here
// are small shell scripts, so the behaviour is checked without the rest of the system.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/heartbeat.h"
#include "launcher/role_process.h"
#include "tests/test_util.h"

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
