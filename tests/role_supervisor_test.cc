// SuperviseRoles once training is over: servers that outlive every worker of the job. The roles
// here are small bash scripts, so the supervisor's behaviour is checked without the rest of the
// system; a "server" either exits by itself or waits for its supervisor's stop signal.
#include "launcher/role_supervisor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/role_signals.h"
#include "launcher/exit_codes.h"
#include "launcher/supervisor_events.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::TempDir;
using Clock = std::chrono::steady_clock;

// A role running `script` under bash, logging to `name`.log in `dir`.
SupervisedRole BashRole(const TempDir& dir, RoleSlot::Kind kind, const std::string& name, const std::string& script) {
  RoleProcessOptions o;
  o.name = name;
  o.executable = "/bin/bash";
  o.args = {"-c", script, name};
  o.log_file = dir.File(name + ".log");
  o.heartbeat_timeout_ms = 0;
  o.max_restarts = 0;
  return {kind, std::make_unique<RoleProcess>(o)};
}

// A server that never ends by itself: it writes `marker` when its supervisor asks it to stop,
// then exits 0, as a real one does after its checkpoint.
std::string ServerUntilStopped(const std::string& marker) {
  return "trap 'echo stopped > " + marker + "; exit 0' " + std::to_string(SupervisorStopSignal()) +
         "; for i in $(seq 600); do sleep 0.05; done; exit 3";
}

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(RoleSupervisor, AServerThatOutlivesEveryWorkerIsStoppedInOrderAndTheJobSucceeds) {
  TempDir dir;
  const std::string marker = dir.File("server-stopped");
  std::vector<SupervisedRole> roles;
  roles.push_back(BashRole(dir, RoleSlot::Kind::kServer, "pserver-0", ServerUntilStopped(marker)));
  roles.push_back(BashRole(dir, RoleSlot::Kind::kWorker, "worker-0", "sleep 0.2"));
  roles.push_back(BashRole(dir, RoleSlot::Kind::kWorker, "worker-1", "sleep 0.5"));
  SupervisorEvents events(dir.path().string(), false);
  SupervisionHooks hooks;
  hooks.servers_outliving_workers = std::chrono::seconds(2);
  const auto start = Clock::now();
  ::testing::internal::CaptureStderr();
  const int status = SuperviseRoles(roles, dir.path().string(), &events, hooks);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const double took = SecondsSince(start);
  EXPECT_EQ(status, kExitSuccess) << err;
  EXPECT_TRUE(std::filesystem::exists(marker)) << "the server was not asked to stop";
  // Not before the slower worker finished (0.5 s) and the 2 s that follow. (Left alone, the
  // server would have exited 3 after 30 s, failing the job.)
  EXPECT_GE(took, 2.5);
  EXPECT_NE(err.find("pserver-0 was still running 2 s after every worker finished"), std::string::npos) << err;
  EXPECT_EQ(roles[0].process->state(), RoleProcess::State::kSucceeded);
}

TEST(RoleSupervisor, AServerThatEndsByItselfAfterTheWorkersIsLeftAlone) {
  TempDir dir;
  const std::string marker = dir.File("server-stopped");
  std::vector<SupervisedRole> roles;
  // Ends 1 s after the worker, well inside the patience.
  roles.push_back(BashRole(dir, RoleSlot::Kind::kServer, "pserver-0",
                           "trap 'echo stopped > " + marker + "; exit 0' " + std::to_string(SupervisorStopSignal()) +
                               "; for i in $(seq 24); do sleep 0.05; done"));
  roles.push_back(BashRole(dir, RoleSlot::Kind::kWorker, "worker-0", "sleep 0.2"));
  SupervisorEvents events(dir.path().string(), false);
  SupervisionHooks hooks;
  hooks.servers_outliving_workers = std::chrono::seconds(20);
  ::testing::internal::CaptureStderr();
  const int status = SuperviseRoles(roles, dir.path().string(), &events, hooks);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, kExitSuccess) << err;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a server that was ending by itself was stopped";
  EXPECT_EQ(err.find("still running"), std::string::npos) << err;
}

// A rank of servers alone (cluster mode): its own workers are none, so it waits for the hook
// to say every other rank's have finished, however long that takes.
TEST(RoleSupervisor, ARankWithoutWorkersWaitsForTheOtherRanksWorkers) {
  TempDir dir;
  const std::string marker = dir.File("server-stopped");
  std::vector<SupervisedRole> roles;
  roles.push_back(BashRole(dir, RoleSlot::Kind::kServer, "pserver-0", ServerUntilStopped(marker)));
  SupervisorEvents events(dir.path().string(), false);
  SupervisionHooks hooks;
  hooks.servers_outliving_workers = std::chrono::milliseconds(500);
  const auto start = Clock::now();
  bool every_call_said_mine_finished = true;
  hooks.every_worker_finished = [&](bool mine_finished) {
    every_call_said_mine_finished = every_call_said_mine_finished && mine_finished;
    return SecondsSince(start) >= 1.5;  // the other ranks' workers finish 1.5 s in
  };
  ::testing::internal::CaptureStderr();
  const int status = SuperviseRoles(roles, dir.path().string(), &events, hooks);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, kExitSuccess) << err;
  EXPECT_TRUE(every_call_said_mine_finished);
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_GE(SecondsSince(start), 2.0);  // 1.5 s, then the 0.5 s of patience
}

// While a worker still runs, a server is never stopped, however long the step takes.
TEST(RoleSupervisor, AServerIsNotStoppedWhileAWorkerRuns) {
  TempDir dir;
  const std::string marker = dir.File("server-stopped");
  std::vector<SupervisedRole> roles;
  roles.push_back(BashRole(dir, RoleSlot::Kind::kServer, "pserver-0", ServerUntilStopped(marker)));
  // The worker runs 2 s, four times the patience, and sees the server still there as it ends.
  roles.push_back(BashRole(dir, RoleSlot::Kind::kWorker, "worker-0", "sleep 2; [ ! -e " + marker + " ]"));
  SupervisorEvents events(dir.path().string(), false);
  SupervisionHooks hooks;
  hooks.servers_outliving_workers = std::chrono::milliseconds(500);
  ::testing::internal::CaptureStderr();
  const int status = SuperviseRoles(roles, dir.path().string(), &events, hooks);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, kExitSuccess) << err;
  EXPECT_EQ(roles[1].process->state(), RoleProcess::State::kSucceeded) << "the server was stopped under the worker";
  EXPECT_TRUE(std::filesystem::exists(marker));
}

}  // namespace
}  // namespace psformer
