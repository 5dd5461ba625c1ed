// A `psformer` command run in the background, as a user at a terminal runs it: in a process group
// of its own (the terminal's foreground group), so that a test can press Ctrl-C (SIGINT to the
// group) or kill the whole job (SIGKILL to the group), and watch the run directory meanwhile.
#ifndef PSFORMER_TESTS_BACKGROUND_JOB_H_
#define PSFORMER_TESTS_BACKGROUND_JOB_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace psformer::testing {

class BackgroundJob {
 public:
  // Runs `launcher PSFORMER_BINARY arguments` from the source directory (`launcher`: "" or an
  // mpirun command line ending in a space); stdout and stderr go to `output_file`.
  BackgroundJob(const std::string& arguments, const std::string& output_file, const std::string& launcher = "")
      : output_file_(output_file) {
    const int fd = open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    Start(arguments, launcher, fd);
    if (fd >= 0) close(fd);
  }

  // Piped into a reader that goes away, as `psformer ... 2>&1 | tee LOG` at a terminal whose tee
  // ends (the same Ctrl-C, a closed window) or `| head -c BYTES`: stdout and stderr go into a
  // pipe read by `head -c console_bytes > output_file`, in the job's process group; once head
  // has its bytes (or a signal to the group ended it), every write to the console fails.
  struct ConsoleThatCloses {
    size_t console_bytes;
  };
  BackgroundJob(const std::string& arguments, const std::string& output_file, ConsoleThatCloses console,
                const std::string& launcher = "")
      : output_file_(output_file) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return;
    Start(arguments, launcher, pipe_fds[1]);
    const std::string head = "exec head -c " + std::to_string(console.console_bytes) + " > '" + output_file + "'";
    reader_ = fork();
    if (reader_ == 0) {
      setpgid(0, pid_);
      dup2(pipe_fds[0], STDIN_FILENO);
      execl("/bin/sh", "sh", "-c", head.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    if (reader_ > 0) setpgid(reader_, pid_);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
  }

  ~BackgroundJob() {
    if (pid_ > 0 && exit_status_ < 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_ > 0) {
      kill(reader_, SIGKILL);
      waitpid(reader_, nullptr, 0);
    }
  }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `signal` to the job's process group, as Ctrl-C at a terminal does with SIGINT.
  void SignalGroup(int signal) const { kill(-pid_, signal); }

  // True once the job has exited (and reaps it).
  bool Exited() {
    int status = 0;
    if (exit_status_ < 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exit_status_ >= 0;
  }

  // Waits for the job to exit; its exit status (128 + signal when killed), or -1 on timeout.
  int Wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!Exited() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_status_;
  }

  std::string Output() const { return ReadAll(output_file_); }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  // Runs the command in a new process group with stdout and stderr on `console` (if >= 0).
  void Start(const std::string& arguments, const std::string& launcher, int console) {
    const std::string command =
        std::string("cd ") + PSFORMER_SOURCE_DIR + " && exec " + launcher + PSFORMER_BINARY + " " + arguments;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      if (console >= 0) {
        dup2(console, STDOUT_FILENO);
        dup2(console, STDERR_FILENO);
      }
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid_ > 0) setpgid(pid_, pid_);  // also here, so that a signal sent right away finds the group
  }

  pid_t pid_ = -1;
  pid_t reader_ = -1;  // the console's reader, when there is one
  int exit_status_ = -1;
  std::string output_file_;
};

// The largest training step logged in RUN_DIR/metrics.jsonl so far (0 when none).
inline int64_t LastLoggedStep(const std::string& run_dir) {
  static const std::regex kStepWithLoss("\"step\": ([0-9]+), \"loss\"");
  const std::string all = BackgroundJob::ReadAll(run_dir + "/metrics.jsonl");
  int64_t last = 0;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), kStepWithLoss); it != std::sregex_iterator(); ++it) {
    last = std::max<int64_t>(last, std::stoll((*it)[1].str()));
  }
  return last;
}

// Waits until `done()` holds, asked every 20 ms; false if the job exits first or time runs out.
inline bool WaitUntil(BackgroundJob* job, std::chrono::seconds limit, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    if (job->Exited()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits until metrics.jsonl logs a step >= `step`; false if the job exits first or time runs out.
inline bool WaitForStep(BackgroundJob* job, const std::string& run_dir, int64_t step, std::chrono::seconds limit) {
  return WaitUntil(job, limit, [&] { return LastLoggedStep(run_dir) >= step; });
}

// The newest step of RUN_DIR with a complete checkpoint (its manifest written), or -1.
inline int64_t NewestCompleteCheckpoint(const std::string& run_dir) {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    long long step = 0;
    if (std::sscanf(entry.path().filename().c_str(), "step-%lld", &step) == 1 &&
        std::filesystem::exists(entry.path() / "manifest.pbtxt")) {
      newest = std::max<int64_t>(newest, step);
    }
  }
  return newest;
}

// Waits until RUN_DIR holds a complete checkpoint of a step >= `step`; false if the job exits
// first or time runs out.
inline bool WaitForCheckpoint(BackgroundJob* job, const std::string& run_dir, int64_t step,
                              std::chrono::seconds limit) {
  return WaitUntil(job, limit, [&] { return NewestCompleteCheckpoint(run_dir) >= step; });
}

// The process ids a supervisor started ("started pid N" in its log).
inline std::vector<pid_t> StartedPids(const std::string& supervisor_log) {
  static const std::regex kStarted("started pid ([0-9]+)");
  const std::string all = BackgroundJob::ReadAll(supervisor_log);
  std::vector<pid_t> pids;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), kStarted); it != std::sregex_iterator(); ++it) {
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
  }
  return pids;
}

// The fields of /proc/PID/stat after the process's name (its state first), or "" once it is gone.
inline std::string StatFields(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return "";
  return text.substr(paren + 2);
}

// True while `pid` runs (a zombie waiting to be reaped counts as gone).
inline bool ProcessRuns(pid_t pid) {
  const std::string fields = StatFields(pid);
  return !fields.empty() && fields[0] != 'Z' && fields[0] != 'X';
}

// The pid of the process that started `pid` (its parent), or -1 once it is gone.
inline pid_t ParentOf(pid_t pid) {
  long long parent = -1;
  if (std::sscanf(StatFields(pid).c_str(), "%*c %lld", &parent) != 1) return -1;
  return static_cast<pid_t>(parent);
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_BACKGROUND_JOB_H_
