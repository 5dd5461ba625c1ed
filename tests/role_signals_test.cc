// InstallRoleStopSignals: a supervised role acts on its supervisor's stop signal and reports
// another sender's, also when both arrive while the role cannot take either (a busy process the
// scheduler has not run: `pkill` signals a role and its supervisor, which then signals the role,
// at once). Each role here is a forked child that holds its signals blocked until they were
// sent, so that they are pending together, every time.
#include "common/role_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace psformer {
namespace {

std::atomic<int> g_actions{0};  // NOLINT: the action is a plain function pointer.

// What a role child saw once it took its pending signals.
struct Seen {
  int actions = -1;          // how often the stop action ran
  std::string report;        // TakeForeignStopSignalReport's first answer
  std::string report_again;  // its second (each signal is reported once)
};

class RoleChild {
 public:
  // Forks a role as its supervisor (this process) starts one: its stop signals installed, then
  // held pending until Finish.
  RoleChild() {
    int ready[2], go[2], seen[2];
    if (pipe(ready) != 0 || pipe(go) != 0 || pipe(seen) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(go[1]);
      close(seen[0]);
      setenv("PSFORMER_HEARTBEAT_FD", "0", 1);
      InstallRoleStopSignals([](int) { g_actions.fetch_add(1); }, {SIGTERM, SIGINT, SIGHUP});
      sigset_t held;
      sigemptyset(&held);
      sigaddset(&held, SIGTERM);
      sigaddset(&held, SupervisorStopSignal());
      sigprocmask(SIG_BLOCK, &held, nullptr);
      char byte = 0;
      if (write(ready[1], &byte, 1) != 1 || read(go[0], &byte, 1) != 1) _exit(1);
      sigprocmask(SIG_UNBLOCK, &held, nullptr);  // the pending signals are taken here
      const std::string first = TakeForeignStopSignalReport();
      const std::string second = TakeForeignStopSignalReport();
      const std::string line = std::to_string(g_actions.load()) + "\n" + first + "\n" + second + "\n";
      _exit(write(seen[1], line.data(), line.size()) == static_cast<ssize_t>(line.size()) ? 0 : 1);
    }
    close(ready[1]);
    close(go[0]);
    close(seen[1]);
    go_ = go[1];
    seen_ = seen[0];
    char byte = 0;
    started_ = pid_ > 0 && read(ready[0], &byte, 1) == 1;
    close(ready[0]);
  }
  ~RoleChild() {
    if (go_ >= 0) close(go_);
    if (seen_ >= 0) close(seen_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  bool started() const { return started_; }
  pid_t pid() const { return pid_; }

  // Lets the child take its pending signals; what it saw.
  Seen Finish() {
    char byte = 0;
    EXPECT_EQ(write(go_, &byte, 1), 1);
    close(go_);
    go_ = -1;
    std::string out;
    char buffer[256];
    for (ssize_t n; (n = read(seen_, buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the role " << (WIFSIGNALED(status) ? "died of signal " + std::to_string(WTERMSIG(status)) : "failed");
    pid_ = -1;
    Seen seen;
    const size_t a = out.find('\n'), b = out.find('\n', a + 1), c = out.find('\n', b + 1);
    if (c == std::string::npos) return seen;
    seen.actions = std::stoi(out.substr(0, a));
    seen.report = out.substr(a + 1, b - a - 1);
    seen.report_again = out.substr(b + 1, c - b - 1);
    return seen;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  int seen_ = -1;
  bool started_ = false;
};

// Sends `signal` to `pid` from a process that is neither the role nor its supervisor (as pkill
// does); that process's pid.
pid_t SignalFromAnotherProcess(pid_t pid, int signal) {
  const pid_t sender = fork();
  if (sender == 0) _exit(kill(pid, signal) == 0 ? 0 : 1);
  int status = 0;
  EXPECT_EQ(waitpid(sender, &status, 0), sender);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return sender;
}

TEST(RoleSignals, ASupervisorsStopIsTakenAlsoWhileAnotherSendersSigtermIsPending) {
  RoleChild role;
  ASSERT_TRUE(role.started());
  const pid_t other = SignalFromAnotherProcess(role.pid(), SIGTERM);
  // The supervisor's stop comes while the other SIGTERM is still pending. (Were it a SIGTERM too,
  // the kernel would drop it as already pending, and the role would see only the other sender's.)
  ASSERT_EQ(kill(role.pid(), SupervisorStopSignal()), 0);
  const Seen seen = role.Finish();
  EXPECT_EQ(seen.actions, 1);
  EXPECT_EQ(seen.report, std::to_string(SIGTERM) + " " + std::to_string(other));
  EXPECT_EQ(seen.report_again, "");
}

TEST(RoleSignals, AnotherSendersSigtermAloneIsReportedOnceAndNotActedOn) {
  RoleChild role;
  ASSERT_TRUE(role.started());
  const pid_t other = SignalFromAnotherProcess(role.pid(), SIGTERM);
  const Seen seen = role.Finish();
  EXPECT_EQ(seen.actions, 0);
  EXPECT_EQ(seen.report, std::to_string(SIGTERM) + " " + std::to_string(other));
  EXPECT_EQ(seen.report_again, "");
}

TEST(RoleSignals, TheSupervisorsStopAloneIsActedOnAndNothingIsReported) {
  RoleChild role;
  ASSERT_TRUE(role.started());
  ASSERT_EQ(kill(role.pid(), SupervisorStopSignal()), 0);
  const Seen seen = role.Finish();
  EXPECT_EQ(seen.actions, 1);
  EXPECT_EQ(seen.report, "");
  EXPECT_EQ(seen.report_again, "");
}

}  // namespace
}  // namespace psformer
