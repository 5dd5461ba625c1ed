#include "launcher/watched_mpirun.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <utility>

#include "launcher/child_process.h"
#include "launcher/exit_codes.h"
#include "launcher/mpirun_session_directory.h"
#include "launcher/role_supervisor.h"

namespace psformer {
namespace {

using Clock = std::chrono::steady_clock;

// What the signal handlers may touch: the pid to pass signals on to, and whether one came.
std::atomic<pid_t> g_mpirun_pid{-1};  // NOLINT: a signal handler can reach nothing else.
std::atomic<int> g_signals{0};        // NOLINT
std::atomic<bool> g_hung_up{false};   // NOLINT

// mpirun, in a group of its own, hears neither the terminal's Ctrl-C nor its closing. The first
// signal asks for the orderly stop, which the watch loop passes on (PassOnTheStop); a second one
// is a SIGINT to mpirun: kill the job now.
void OnSignal(int signal) {
  const bool first = g_signals.fetch_add(1) == 0;
  if (first && signal == SIGHUP) g_hung_up.store(true);
  const pid_t pid = g_mpirun_pid.load();
  if (!first && pid > 0) kill(pid, SIGINT);
}

// SIGUSR1 (kOrderlyStopSignal), as a job's supervisors and mpirun take it: the orderly stop, and a
// second one kills nothing. Its default action would end this process and leave mpirun and the
// job running unwatched.
void OnOrderlyStop(int) {
  int none = 0;
  g_signals.compare_exchange_strong(none, 1);
}

// How long a stop asked while the job still starts waits for it to start (and be stopped in
// order) before mpirun is ended: a job that never starts would keep the launch waiting for ever.
constexpr std::chrono::seconds kStopWhileStarting{10};

// The orderly stop goes to mpirun as SIGUSR1, which it passes on to every rank and then waits for
// them (a SIGINT or SIGTERM it answers by killing the ranks a second later, before a large
// model's servers wrote their checkpoint). mpirun passes it only to the ranks it has started, and
// one that gets it before its main() began dies of it; so it is sent once the job has started
// (every rank is then past its start), and until then the launch says that it waits. Returns
// whether it was sent.
bool PassOnTheStop(pid_t mpirun, const std::function<bool()>& job_started, bool* said_waiting) {
  if (!job_started || job_started()) {
    kill(mpirun, kOrderlyStopSignal);
    return true;
  }
  if (!std::exchange(*said_waiting, true)) {
    std::cerr << "psformer launch: the job is still starting; it stops in order once it has, or is ended in "
              << kStopWhileStarting.count() << " s if it has not (Ctrl-C again to end it at once)" << std::endl;
  }
  return false;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "mpirun exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("mpirun was killed by signal ") + strsignal(WTERMSIG(status));
  return "mpirun ended (wait status " + std::to_string(status) + ")";
}

int ExitStatus(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// One of mpirun's output streams, relayed to this process's. mpirun does not survive a console
// that went away (a closed terminal, `| head`): its next write there ends it, and its ranks with it
// (Open MPI 4.1 kills them, then crashes), which looked like a failed job and was restarted. So
// mpirun writes into a pipe of ours; what the console no longer takes is appended to a file.
struct Relay {
  int from = -1;  // the pipe's read end; -1 once it ended
  int to = -1;    // STDOUT_FILENO or STDERR_FILENO
  bool console_gone = false;
};

// Writes what mpirun said to the relay's console, or once that failed, appends it to `fallback`
// (when its directory exists: a job that never made its run directory leaves none behind).
void Forward(Relay& relay, const char* data, size_t size, const std::string& fallback) {
  while (size > 0 && !relay.console_gone) {
    const ssize_t n = write(relay.to, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      relay.console_gone = true;
      break;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  if (size == 0 || fallback.empty()) return;
  const int fd = open(fallback.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data += n;
    size -= static_cast<size_t>(n);
  }
  close(fd);
}

// Relays what the pipes hold, waiting up to `wait` for some; returns whether anything came.
bool Pump(std::array<Relay, 2>& relays, std::chrono::milliseconds wait, const std::string& fallback) {
  std::array<pollfd, 2> fds{};
  nfds_t open_pipes = 0;
  for (const Relay& relay : relays) {
    if (relay.from >= 0) fds[open_pipes++] = pollfd{relay.from, POLLIN, 0};
  }
  if (open_pipes == 0) {
    std::this_thread::sleep_for(wait);
    return false;
  }
  if (poll(fds.data(), open_pipes, static_cast<int>(wait.count())) <= 0) return false;
  bool came = false;
  char buffer[65536];
  for (Relay& relay : relays) {
    if (relay.from < 0) continue;
    const ssize_t n = read(relay.from, buffer, sizeof(buffer));
    if (n > 0) {
      Forward(relay, buffer, static_cast<size_t>(n), fallback);
      came = true;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(relay.from);  // every writer is gone
      relay.from = -1;
    }
  }
  return came;
}

// Relays what mpirun left in the pipes, then closes them. A process it started that still holds
// a write end (one that outlived it) is not waited for.
void Drain(std::array<Relay, 2>& relays, const std::string& fallback) {
  for (int i = 0; i < 1000 && Pump(relays, std::chrono::milliseconds(0), fallback); ++i) {
  }
  for (Relay& relay : relays) {
    if (relay.from >= 0) close(relay.from);
    relay.from = -1;
  }
}

// Starts mpirun with its stdout and stderr into pipes that `relays` read; -1 when it could not.
pid_t StartMpirun(const std::vector<std::string>& command, std::array<Relay, 2>& relays) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return -1;
  }
  ChildProcessOptions child;
  child.args = command;
  child.command = "psformer launch";
  child.stdout_fd = out[1];
  child.stderr_fd = err[1];
  const pid_t pid = StartChildProcess(child);
  const int error = errno;
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    errno = error;
    return -1;
  }
  relays[0].from = out[0];
  relays[0].to = STDOUT_FILENO;
  relays[1].from = err[0];
  relays[1].to = STDERR_FILENO;
  for (const Relay& relay : relays) {
    fcntl(relay.from, F_SETFL, O_NONBLOCK);
    // Room for what mpirun says while a host probe keeps this process from reading (at most its
    // timeout); best effort, the default 64 KiB otherwise.
    fcntl(relay.from, F_SETPIPE_SZ, 1 << 20);
  }
  return pid;
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
  g_signals.store(0);
  g_hung_up.store(false);
  struct sigaction pass_on = {}, orderly = {}, old_int = {}, old_term = {}, old_hup = {}, old_usr1 = {};
  pass_on.sa_handler = OnSignal;
  sigemptyset(&pass_on.sa_mask);
  sigaction(SIGINT, &pass_on, &old_int);
  sigaction(SIGTERM, &pass_on, &old_term);
  sigaction(SIGHUP, &pass_on, &old_hup);
  orderly.sa_handler = OnOrderlyStop;
  sigemptyset(&orderly.sa_mask);
  sigaction(SIGUSR1, &orderly, &old_usr1);

  std::array<Relay, 2> relays;
  const pid_t pid = StartMpirun(options.command, relays);
  if (pid < 0) {
    result.exit_status = kExitFailure;
    result.cause = std::string("cannot start mpirun: ") + strerror(errno);
  } else {
    g_mpirun_pid.store(pid);
    std::vector<Clock::time_point> last_answer(options.hosts.size(), Clock::now());
    std::vector<std::string> last_why(options.hosts.size());  // what the newest failed probe of each said
    Clock::time_point next_probe = Clock::now() + options.probe_every;
    int status = 0;
    bool stop_passed_on = false, said_waiting = false, started = !options.job_started;
    const Clock::time_point began = Clock::now();
    Clock::time_point stop_asked{}, next_start_check = began;
    while (true) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      if (g_signals.load() == 1 && !stop_passed_on) {
        if (stop_asked == Clock::time_point{}) stop_asked = Clock::now();
        stop_passed_on = PassOnTheStop(pid, options.job_started, &said_waiting);
        if (!stop_passed_on && Clock::now() - stop_asked > kStopWhileStarting) {
          result.cause = "the job had not started " + std::to_string(kStopWhileStarting.count()) +
                         " s after the stop was asked; ended mpirun";
          status = EndMpirun(pid, std::chrono::seconds(5));
          break;
        }
      }
      if (!started && g_signals.load() == 0 && options.start_timeout.count() > 0 && Clock::now() >= next_start_check) {
        started = options.job_started();
        next_start_check = Clock::now() + std::chrono::milliseconds(500);
        if (!started && Clock::now() - began > options.start_timeout) {
          std::string names;
          for (const std::string& host : options.hosts) names += (names.empty() ? "" : ", ") + host;
          result.cause =
              "the job had not started " +
              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options.start_timeout).count()) +
              " s after mpirun began (its daemons on " + names +
              " never all came up: an rsh agent or ssh that hangs?); ended mpirun";
          status = EndMpirun(pid, std::chrono::seconds(5));
          break;
        }
      }
      const bool watching = options.host_timeout.count() > 0 && g_signals.load() == 0;
      if (watching && Clock::now() >= next_probe) {
        std::vector<std::string> why;
        const std::vector<bool> answers = ProbeHosts(options.hosts, options.probe, &why);
        const auto now = Clock::now();
        for (size_t i = 0; i < answers.size(); ++i) {
          if (answers[i]) last_answer[i] = now;
          if (!answers[i]) last_why[i] = why[i];
        }
        size_t lost = 0;
        for (size_t i = 0; i < options.hosts.size() && result.lost_host.empty(); ++i) {
          if (now - last_answer[i] > options.host_timeout) {
            result.lost_host = options.hosts[i];
            lost = i;
          }
        }
        if (!result.lost_host.empty() && waitpid(pid, &status, WNOHANG) != pid) {
          const auto silent = std::chrono::duration_cast<std::chrono::seconds>(options.host_timeout).count();
          result.cause = "host " + result.lost_host + " has not answered for more than " + std::to_string(silent) +
                         " s" + (last_why[lost].empty() ? "" : " (" + last_why[lost] + ")") + "; ended mpirun";
          status = EndMpirun(pid, std::chrono::seconds(5));
          break;
        }
        result.lost_host.clear();
        next_probe = now + options.probe_every;
      }
      Pump(relays, std::chrono::milliseconds(20), options.console_gone_log);
    }
    Drain(relays, options.console_gone_log);
    g_mpirun_pid.store(-1);
    result.exit_status = ExitStatus(status);
    if (result.cause.empty() && result.exit_status != 0) result.cause = DescribeWaitStatus(status);
  }
  result.interrupted = g_signals.load() > 0;
  result.hung_up = g_hung_up.load();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  return result;
}

}  // namespace psformer
