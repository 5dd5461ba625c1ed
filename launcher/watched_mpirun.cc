#include "launcher/watched_mpirun.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "launcher/child_process.h"
#include "launcher/exit_codes.h"
#include "launcher/mpirun_session_directory.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

// What the signal handlers may touch: the pid to pass signals on to, and whether one came.
std::atomic<pid_t> g_mpirun_pid{-1};     // NOLINT: a signal handler can reach nothing else.
std::atomic<bool> g_interrupted{false};  // NOLINT
std::atomic<bool> g_hung_up{false};      // NOLINT

void PassOn(int signal) {
  const bool first = !g_interrupted.exchange(true);
  // mpirun in a group of its own never hears the terminal close: it gets a Ctrl-C's SIGINT, which
  // it passes on to the ranks, who stop in order (mpirun answers SIGTERM by ending the ranks
  // before their servers wrote a checkpoint).
  if (first && signal == SIGHUP) g_hung_up.store(true);
  const pid_t pid = g_mpirun_pid.load();
  if (pid > 0) kill(pid, signal == SIGHUP ? SIGINT : signal);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "mpirun exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("mpirun was killed by signal ") + strsignal(WTERMSIG(status));
  return "mpirun ended (wait status " + std::to_string(status) + ")";
}

int ExitStatus(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

pid_t StartMpirun(const std::vector<std::string>& command) {
  ChildProcessOptions child;
  child.args = command;
  child.command = "psformer launch";
  return StartChildProcess(child);
}

// Ends mpirun after its job lost a host: SIGTERM (mpirun kills its ranks on the hosts it still
// reaches), then SIGKILL if it is still there after `grace`, and the session directory it had no
// chance to remove goes with it. Returns its wait status.
int EndMpirun(pid_t pid, std::chrono::seconds grace) {
  kill(pid, SIGTERM);
  const auto deadline = Clock::now() + grace;
  int status = 0;
  while (Clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  RemoveKilledMpirunSessionDirectory(pid);
  return status;
}

}  // namespace

WatchedMpirunResult RunWatchedMpirun(const WatchedMpirunOptions& options) {
  WatchedMpirunResult result;
  g_interrupted.store(false);
  g_hung_up.store(false);
  struct sigaction pass_on = {}, old_int = {}, old_term = {}, old_hup = {};
  pass_on.sa_handler = PassOn;
  sigemptyset(&pass_on.sa_mask);
  sigaction(SIGINT, &pass_on, &old_int);
  sigaction(SIGTERM, &pass_on, &old_term);
  sigaction(SIGHUP, &pass_on, &old_hup);

  const pid_t pid = StartMpirun(options.command);
  if (pid < 0) {
    result.exit_status = kExitFailure;
    result.cause = std::string("cannot start mpirun: ") + strerror(errno);
  } else {
    g_mpirun_pid.store(pid);
    std::vector<Clock::time_point> last_answer(options.hosts.size(), Clock::now());
    Clock::time_point next_probe = Clock::now() + options.probe_every;
    int status = 0;
    while (true) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      const bool watching = options.host_timeout.count() > 0 && !g_interrupted.load();
      if (watching && Clock::now() >= next_probe) {
        const std::vector<bool> answers = ProbeHosts(options.hosts, options.probe);
        const auto now = Clock::now();
        for (size_t i = 0; i < answers.size(); ++i) {
          if (answers[i]) last_answer[i] = now;
        }
        for (size_t i = 0; i < options.hosts.size() && result.lost_host.empty(); ++i) {
          if (now - last_answer[i] > options.host_timeout) result.lost_host = options.hosts[i];
        }
        if (!result.lost_host.empty() && waitpid(pid, &status, WNOHANG) != pid) {
          const auto silent = std::chrono::duration_cast<std::chrono::seconds>(options.host_timeout).count();
          result.cause = "host " + result.lost_host + " has not answered for more than " + std::to_string(silent) +
                         " s; ended mpirun";
          status = EndMpirun(pid, std::chrono::seconds(5));
          break;
        }
        result.lost_host.clear();
        next_probe = now + options.probe_every;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    g_mpirun_pid.store(-1);
    result.exit_status = ExitStatus(status);
    if (result.cause.empty() && result.exit_status != 0) result.cause = DescribeWaitStatus(status);
  }
  result.interrupted = g_interrupted.load();
  result.hung_up = g_hung_up.load();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  return result;
}

}  // namespace psformer
