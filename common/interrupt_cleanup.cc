#include "common/interrupt_cleanup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

struct Temporary {
  fs::path path;
  std::vector<fs::path> created_parents;  // deepest first
};

Mutex g_mu;
std::vector<Temporary> g_temporaries PSF_GUARDED_BY(g_mu);
std::vector<pid_t> g_children PSF_GUARDED_BY(g_mu);  // started by SpawnChild, not yet reaped

// Removes `temporary`'s path with all it holds, then each parent it created that is left empty
// (fs::remove refuses a directory that is not).
void RemoveWhole(const Temporary& temporary) {
  std::error_code ec;
  // A writer still adding files may leave one after a pass: a few passes then.
  for (int pass = 0; pass < 5 && fs::exists(temporary.path, ec); ++pass) fs::remove_all(temporary.path, ec);
  for (const fs::path& parent : temporary.created_parents) {
    if (!fs::remove(parent, ec)) break;
  }
}

void Forget(const fs::path& path) PSF_REQUIRES(g_mu) {
  g_temporaries.erase(
      std::remove_if(g_temporaries.begin(), g_temporaries.end(), [&](const Temporary& t) { return t.path == path; }),
      g_temporaries.end());
}

// The stop signal's number, and a pipe its handler writes to: the handler runs on whichever
// thread the signal reached (OpenBLAS's own threads among them, started before main) and does
// only what a handler may; the waiting thread does the rest.
std::atomic<int> g_signal{0};
int g_wake[2] = {-1, -1};

void OnStop(int signal) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = write(g_wake[1], &byte, 1);
}

// Ends the process by `signal`'s default action.
[[noreturn]] void DieOf(int signal) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(signal, &default_action, nullptr);
  raise(signal);
  _exit(128 + signal);  // not reached
}

// Waits for a stop signal, removes what is registered and dies of the signal.
void WaitForStop(const std::string& command) {
  char byte = 0;
  while (read(g_wake[0], &byte, 1) != 1) {
    if (errno != EINTR) return;  // cannot wait: no cleanup, as without it
  }
  const int signal = g_signal.load();
  MutexLock lock(&g_mu);  // held until the process ends: no commit after the removal
  for (const pid_t child : g_children) {
    kill(child, SIGKILL);
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  std::string removed;
  for (const Temporary& temporary : g_temporaries) {
    RemoveWhole(temporary);
    removed += (removed.empty() ? " " : ", ") + temporary.path.string();
  }
  const char* how = signal == SIGHUP ? "hung up" : signal == SIGTERM ? "terminated" : "interrupted";
  std::cerr << "psformer " << command << ": " << how
            << (removed.empty() ? "" : "; removed its unfinished files:" + removed) << std::endl;
  DieOf(signal);
}

}  // namespace

void RemoveTemporariesOnInterrupt(const std::string& command) {
  if (pipe2(g_wake, O_CLOEXEC) != 0) return;  // no cleanup then, as before
  struct sigaction action {};
  action.sa_handler = OnStop;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    // One ignored when this process began (a shell's background job ignores SIGINT, nohup
    // SIGHUP) stays ignored, as the one who started it asked.
    struct sigaction before {};
    if (sigaction(signal, nullptr, &before) == 0 && before.sa_handler == SIG_IGN) continue;
    sigaction(signal, &action, nullptr);
  }
  std::thread(WaitForStop, command).detach();
}

void RegisterTemporary(const fs::path& path, std::vector<fs::path> created_parents) {
  MutexLock lock(&g_mu);
  g_temporaries.push_back({path, std::move(created_parents)});
}

void RemoveTemporary(const fs::path& path) {
  MutexLock lock(&g_mu);
  Temporary temporary{path, {}};
  for (const Temporary& t : g_temporaries) {
    if (t.path == path) temporary = t;
  }
  RemoveWhole(temporary);
  Forget(path);
}

Status CommitTemporary(const fs::path& path, const std::function<Status()>& commit) {
  MutexLock lock(&g_mu);
  Status committed = commit();
  if (committed.ok()) Forget(path);
  return committed;
}

int SpawnChild(const std::function<int(pid_t* pid)>& spawn, pid_t* pid) {
  MutexLock lock(&g_mu);
  const int error = spawn(pid);
  if (error == 0) g_children.push_back(*pid);
  return error;
}

void WaitForChild(pid_t pid, int* wait_status) {
  // Waited for without reaping, so that the PID stays this child's until it is forgotten.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  {
    MutexLock lock(&g_mu);
    g_children.erase(std::remove(g_children.begin(), g_children.end(), pid), g_children.end());
  }
  while (waitpid(pid, wait_status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace psformer
