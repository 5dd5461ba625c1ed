#include "launcher/role_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "common/logging.h"
#include "common/role_signals.h"
#include "common/supervisor_report.h"
#include "common/transport/shm_segment.h"
#include "launcher/exit_codes.h"
#include "launcher/resource_failure.h"
#include "launcher/role_arguments.h"

extern char** environ;

namespace psformer {
namespace {

// The heartbeat pipe's descriptor number in the child (after stdin, stdout, stderr).
constexpr int kChildHeartbeatFd = 3;

// Progress lines held for a supervisor that does not take them (it takes them every 10 ms).
constexpr size_t kMaxProgressLinesHeld = 1000;

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return "killed by signal " + std::to_string(WTERMSIG(wait_status)) + " (" + strsignal(WTERMSIG(wait_status)) + ")";
  }
  return "stopped (status " + std::to_string(wait_status) + ")";
}

// The last 4 KiB of the log at `path` ("" when it cannot be read).
std::string LogTail(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buffer[4096];
  const off_t size = lseek(fd, 0, SEEK_END);
  const off_t start = size > static_cast<off_t>(sizeof(buffer)) ? size - static_cast<off_t>(sizeof(buffer)) : 0;
  const ssize_t n = pread(fd, buffer, sizeof(buffer), start);
  close(fd);
  return n <= 0 ? "" : std::string(buffer, static_cast<size_t>(n));
}

// What ended a role, from its log: the last error line (logged "E ...", or the command's own
// "psformer ROLE: error: ..."; a role's exit logs its transport's statistics after it), else
// the last non-empty line.
std::string LastLogLine(const std::string& path) {
  std::string tail = LogTail(path);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  std::string last;
  for (size_t end = tail.size(); end > 0;) {
    const size_t newline = tail.rfind('\n', end - 1);
    const size_t begin = newline == std::string::npos ? 0 : newline + 1;
    const std::string line = tail.substr(begin, end - begin);
    if (last.empty()) last = line;
    if (line.rfind("E ", 0) == 0 || (line.rfind("psformer ", 0) == 0 && line.find(": error: ") != std::string::npos)) {
      return line;
    }
    if (newline == std::string::npos) break;
    end = newline;
  }
  return last;
}

}  // namespace

RoleProcess::RoleProcess(RoleProcessOptions options) : options_(std::move(options)) {}

RoleProcess::~RoleProcess() {
  if (state_ == State::kRunning) Kill();
  if (heartbeat_fd_ >= 0) close(heartbeat_fd_);
}

Status RoleProcess::Start() {
  PSF_CHECK(state_ == State::kIdle);
  return Spawn();
}

Status RoleProcess::Spawn() {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::IoError(std::string("pipe: ") + strerror(errno));
  const int log_fd = open(options_.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return Status::IoError("cannot open log file " + options_.log_file + ": " + strerror(errno));
  }
  std::vector<std::string> args = options_.args;
  args.push_back(kIncarnationOption);
  args.push_back(std::to_string(incarnation_));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(options_.executable.c_str()));
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment is built before fork: between fork and exec only async-signal-safe calls.
  std::vector<std::string> mine = options_.environment;
  if (incarnation_ > 0)
    mine.insert(mine.end(), options_.restart_environment.begin(), options_.restart_environment.end());
  std::vector<std::string> env_strings;
  auto replaced = [&](const char* entry) {
    const std::string_view e(entry);
    for (const std::string& m : mine) {
      const std::string_view name = std::string_view(m).substr(0, m.find('=') + 1);
      if (e.substr(0, name.size()) == name) return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PSFORMER_HEARTBEAT_FD=", 22) != 0 && !replaced(*e)) env_strings.emplace_back(*e);
  }
  env_strings.push_back("PSFORMER_HEARTBEAT_FD=" + std::to_string(kChildHeartbeatFd));
  for (const std::string& e : mine) env_strings.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // The stop signals stay blocked in the child until the role installed its handlers
  // (InstallRoleStopSignals): a stop asked as it starts (a Ctrl-C that came with the job's start)
  // waits for them instead of killing it by the signal's default action. They are blocked here,
  // around the fork, so that the child has them blocked from its first instruction.
  sigset_t stop_signals, before;
  sigemptyset(&stop_signals);
  if (options_.holds_stop_signals_until_handled) {
    for (const int s : {SupervisorStopSignal(), SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, s);
  }
  pthread_sigmask(SIG_BLOCK, &stop_signals, &before);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    const int error = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    close(log_fd);
    // EAGAIN: the machine or the user is out of processes, which waiting may cure (Poll).
    if (error == EAGAIN) {
      return Status::Unavailable(std::string("cannot start a process (fork: ") + strerror(error) + ")");
    }
    return Status::IoError(std::string("fork: ") + strerror(error));
  }
  if (pid == 0) {
    // A role process never outlives the supervisor that watches it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kExitExecFailed);
    setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C is the supervisor's to handle.
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    if (pipe_fds[1] == kChildHeartbeatFd) {
      fcntl(kChildHeartbeatFd, F_SETFD, 0);
    } else {
      dup2(pipe_fds[1], kChildHeartbeatFd);  // dup2 clears close-on-exec on the copy.
    }
    execve(options_.executable.c_str(), argv.data(), envp.data());
    _exit(kExitExecFailed);
  }
  close(pipe_fds[1]);
  close(log_fd);
  if (heartbeat_fd_ >= 0) close(heartbeat_fd_);
  heartbeat_fd_ = pipe_fds[0];
  fcntl(heartbeat_fd_, F_SETFL, O_NONBLOCK);
  pid_ = pid;
  if (options_.started) options_.started(pid);
  state_ = State::kRunning;
  ready_ = false;
  stopped_.clear();
  partial_report_.clear();
  last_heartbeat_ = std::chrono::steady_clock::now();
  PSF_LOG(Info) << options_.name << ": started pid " << pid_ << " (incarnation " << incarnation_ << ")";
  return Status::Ok();
}

void RoleProcess::ReadHeartbeats() {
  char buffer[256];
  while (true) {
    const ssize_t n = read(heartbeat_fd_, buffer, sizeof(buffer));
    if (n > 0) {
      last_heartbeat_ = std::chrono::steady_clock::now();
      // Heartbeat bytes (1) may come between report lines, never inside one.
      for (ssize_t i = 0; i < n; ++i) {
        if (buffer[i] == 1) continue;
        if (buffer[i] != '\n') {
          // Bytes that never end a line are not a report; do not keep them without bound.
          if (partial_report_.size() > 4096) partial_report_.clear();
          partial_report_ += buffer[i];
          continue;
        }
        HandleReport(partial_report_);
        partial_report_.clear();
      }
      continue;
    }
    break;  // EAGAIN (nothing new) or EOF (child gone; waitpid tells).
  }
}

void RoleProcess::HandleReport(const std::string& line) {
  const size_t space = line.find(' ');
  const std::string kind = line.substr(0, space);
  const std::string text = space == std::string::npos ? "" : line.substr(space + 1);
  if (kind == kReportReady) {
    ready_ = true;
  } else if (kind == kReportCheckpointFailed) {
    checkpoint_failures_.push_back(options_.name + ": " + text);
  } else if (kind == kReportProgress) {
    // A role that never reads its console would otherwise hold them all: keep the newest.
    if (progress_.size() >= kMaxProgressLinesHeld) progress_.erase(progress_.begin());
    progress_.push_back(text);
  } else if (kind == kReportFatal) {
    fatal_ = text;
  } else if (kind == kReportStopped) {
    stopped_ = text.empty() ? "on request" : text;
  } else if (kind == kReportSignalled) {
    ForeignSignal signalled;
    std::istringstream fields(text);
    if (fields >> signalled.signal >> signalled.sender && signalled.signal > 0) {
      foreign_signal_ = signalled;
    } else {
      PSF_LOG(Warning) << options_.name << " sent a malformed report: " << line;
    }
  } else {
    PSF_LOG(Warning) << options_.name << " sent an unknown report: " << line;
  }
}

std::vector<std::string> RoleProcess::TakeProgress() {
  if (state_ == State::kRunning) ReadHeartbeats();
  return std::exchange(progress_, {});
}

std::vector<std::string> RoleProcess::TakeCheckpointFailures() {
  if (state_ == State::kRunning) ReadHeartbeats();
  return std::exchange(checkpoint_failures_, {});
}

void RoleProcess::HandleExit(int wait_status) {
  // A killed child never unlinked its shared memory; nothing else of this pid can use it now.
  if (const int n = RemoveShmSegments(std::nullopt, pid_); n > 0) {
    PSF_LOG(Info) << options_.name << ": removed " << n << " shared-memory segment(s) of pid " << pid_;
  }
  pid_ = -1;
  ReadHeartbeats();  // what the child said last is still in the pipe
  // A worker stopped by a stop signal of its own, not the supervisor's (someone signalled it alone):
  // the job cannot go on without it, so it is restarted as if it had died.
  const bool stopped_alone = !stopping_ && !stopped_.empty();
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 && !stopped_alone) {
    state_ = State::kSucceeded;
    PSF_LOG(Info) << options_.name << ": finished";
    return;
  }
  const std::string how =
      stopped_alone ? "stopped " + stopped_ + " on a signal its supervisor did not send" : DescribeExit(wait_status);
  const std::string last_words = LastLogLine(options_.log_file);
  const std::string log =
      "(log: " + options_.log_file + (last_words.empty() ? "" : "; its last line: " + last_words) + ")";
  auto fail = [&](std::string why) {
    state_ = State::kFailed;
    failure_ = std::move(why);
    PSF_LOG(Error) << failure_;
  };
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitDoNotRestart) {
    return fail(options_.name + " " + how + ": " + (fatal_.empty() ? last_words : fatal_) +
                " (not restarted; log: " + options_.log_file + ")");
  }
  if (stopping_) return fail(options_.name + " " + how + " while stopping " + log);
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kExitOutOfResources) return WaitForResources(last_words);
  if (const std::string cause = LibraryThreadFailureMessage(LogTail(options_.log_file)); !cause.empty()) {
    return WaitForResources(how + ": " + cause);
  }
  resource_waits_ = 0;
  if (options_.reports_ready && !ready_) {
    const std::string signature = how + "\n" + last_words;
    if (signature == last_startup_failure_) {
      return fail(options_.name + " " + how +
                  " while starting up, twice in a row the same way: a configuration "
                  "error, not restarted again " +
                  log);
    }
    last_startup_failure_ = signature;
  } else {
    last_startup_failure_.clear();
  }
  if (counted_restarts_ >= options_.max_restarts) {
    return fail(options_.name + " " + how + " after " + std::to_string(counted_restarts_) +
                " restart(s); cluster.max_restarts = " + std::to_string(options_.max_restarts) + " reached " + log);
  }
  const int backoff = std::min(10000, options_.restart_backoff_ms << std::min(counted_restarts_, 16));
  ++counted_restarts_;
  ++incarnation_;
  state_ = State::kBackingOff;
  restart_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff);
  // A role that exits by itself has said why as its last words (a request no server answered,
  // with its step): the console hears it, not only the role's log.
  const std::string why =
      WIFEXITED(wait_status) && !stopped_alone && !last_words.empty() ? " (" + last_words + ")" : "";
  PSF_LOG(Warning) << options_.name << " " << how << why << "; restarting in " << backoff << " ms as incarnation "
                   << incarnation_;
  restarts_.push_back(options_.name + " " + how + why + "; restarting as incarnation " + std::to_string(incarnation_));
}

void RoleProcess::WaitForResources(const std::string& last_words) {
  const std::string cause = last_words.empty() ? "the machine refused it a thread or memory" : last_words;
  if (resource_waits_ >= options_.max_resource_waits) {
    state_ = State::kFailed;
    failure_ =
        options_.name + " could not get a thread or memory " + std::to_string(resource_waits_ + 1) +
        " times in a row, waiting for the machine in between (" + cause +
        "): free threads or memory on this host (other jobs, ulimit -u / -v), then continue with --resume (log: " +
        options_.log_file + ")";
    PSF_LOG(Error) << failure_;
    return;
  }
  const int wait_ms = std::min(30000, options_.resource_wait_ms << std::min(resource_waits_, 16));
  ++resource_waits_;
  ++incarnation_;
  state_ = State::kBackingOff;
  restart_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  const std::string said = options_.name + " is short of threads or memory (" + cause + "); a restart at once would " +
                           "fail alike, so waiting " + std::to_string(wait_ms) + " ms for the machine before " +
                           "starting it as incarnation " + std::to_string(incarnation_) + " (wait " +
                           std::to_string(resource_waits_) + " of at most " +
                           std::to_string(options_.max_resource_waits) + "; not counted in cluster.max_restarts)";
  PSF_LOG(Warning) << said;
  restarts_.push_back(said);
}

void RoleProcess::Pause() {
  if (state_ == State::kRunning) killpg(pid_, SIGSTOP);  // its own group (Spawn): it and what it started
}

void RoleProcess::Continue() {
  if (state_ == State::kRunning) killpg(pid_, SIGCONT);
  ForgetSilence();
}

RoleProcess::State RoleProcess::Poll() {
  const auto now = std::chrono::steady_clock::now();
  if (state_ == State::kRunning) {
    ReadHeartbeats();
    int wait_status = 0;
    const pid_t r = waitpid(pid_, &wait_status, WNOHANG);
    if (r == pid_) {
      HandleExit(wait_status);
    } else if (options_.heartbeat_timeout_ms > 0 &&
               now - last_heartbeat_ > std::chrono::milliseconds(options_.heartbeat_timeout_ms)) {
      PSF_LOG(Warning) << options_.name << ": no heartbeat for " << options_.heartbeat_timeout_ms << " ms; killing pid "
                       << pid_;
      kill(pid_, SIGKILL);
      waitpid(pid_, &wait_status, 0);
      HandleExit(wait_status);
    }
  }
  if (state_ == State::kBackingOff && now >= restart_at_) {
    const Status spawned = Spawn();
    if (spawned.IsUnavailable()) {
      WaitForResources(spawned.message());
    } else if (!spawned.ok()) {
      state_ = State::kFailed;
      failure_ = options_.name + ": cannot restart: " + spawned.message();
    }
  }
  return state_;
}

void RoleProcess::Signal(int signal) {
  if (state_ == State::kRunning && pid_ > 0) kill(pid_, signal);
}

void RoleProcess::RequestStop(int signal) {
  stopping_ = true;
  if (state_ == State::kBackingOff) {
    state_ = State::kFailed;
    failure_ = options_.name + " was waiting to be restarted when the job stopped";
    PSF_LOG(Warning) << failure_;
  }
  Signal(signal);
}

void RoleProcess::Kill() {
  if (state_ == State::kRunning && pid_ > 0) {
    kill(pid_, SIGKILL);
    int wait_status = 0;
    waitpid(pid_, &wait_status, 0);
    RemoveShmSegments(std::nullopt, pid_);
    pid_ = -1;
  }
  if (state_ != State::kSucceeded) state_ = State::kFailed;
}

}  // namespace psformer
