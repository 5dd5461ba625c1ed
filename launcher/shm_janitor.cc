#include "launcher/shm_janitor.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/logging.h"
#include "common/transport/shm_segment.h"

namespace psformer {
namespace {

// What the janitor may do after fork, in a process whose other threads may have held any lock:
// system calls and plain loops over memory it already has, nothing that allocates or locks.
constexpr int kMaxRoles = 4096;       // pids watched (restarts included); later ones are not swept
constexpr pid_t kSupervisorDone = 0;  // the record Done() sends
constexpr int kWaitForRolesMs = 10000;

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

int64_t NowMs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

// The creator pid of /dev/shm entry `name` if it is one of the job's segments ("psformer-<job>-
// <pid>-..."; `prefix` is "psformer-<job>-"), else -1.
pid_t CreatorOf(const char* name, const char* prefix, size_t prefix_size) {
  if (std::strncmp(name, prefix, prefix_size) != 0) return -1;
  pid_t pid = 0;
  const char* p = name + prefix_size;
  int digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 9; ++p, ++digits) pid = pid * 10 + (*p - '0');
  return digits > 0 && *p == '-' ? pid : -1;
}

// Unlinks the job's segments made by a watched role that is gone.
void Sweep(const char* prefix, size_t prefix_size, const pid_t* roles, int count) {
  const int dir = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char buffer[8192];
  while (true) {
    const long n = syscall(SYS_getdents64, dir, buffer, sizeof(buffer));
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      // struct linux_dirent64: inode (8), offset (8), record length (2), type (1), name.
      unsigned short length = 0;
      std::memcpy(&length, buffer + at + 16, sizeof(length));
      const char* name = buffer + at + 19;
      at += length;
      const pid_t creator = CreatorOf(name, prefix, prefix_size);
      if (creator <= 0 || Alive(creator)) continue;
      for (int i = 0; i < count; ++i) {
        if (roles[i] == creator) {
          unlinkat(dir, name, 0);
          break;
        }
      }
    }
  }
  close(dir);
}

[[noreturn]] void RunJanitor(int fd, const char* prefix, size_t prefix_size) {
  setsid();  // no terminal's Ctrl-C or Ctrl-Z, no signal to the job's process group reaches it
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE}) {
    sigaction(signal, &ignore, nullptr);
  }
  prctl(PR_SET_NAME, "psf-shm-janitor");
  // Nothing of the supervisor's stays open here (its run lock, logs, sockets, a test's pipe
  // waiting for EOF): the pipe as descriptor 3, /dev/null as 0, 1 and 2.
  if (fd != 3 && dup2(fd, 3) < 0) _exit(1);
  const int null = open("/dev/null", O_RDWR);
  for (int standard = 0; standard < 3; ++standard) dup2(null, standard);
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    for (int other = 4; other < 65536; ++other) close(other);
  }

  static pid_t roles[kMaxRoles];
  int count = 0;
  alignas(4) char record[sizeof(pid_t)];
  size_t have = 0;
  while (true) {
    const ssize_t n = read(3, record + have, sizeof(record) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the supervisor is gone
    have += static_cast<size_t>(n);
    if (have < sizeof(record)) continue;
    have = 0;
    pid_t pid = 0;
    std::memcpy(&pid, record, sizeof(pid));
    if (pid == kSupervisorDone) _exit(0);
    if (count < kMaxRoles) roles[count++] = pid;
  }
  // Its roles die with it (PR_SET_PDEATHSIG), a moment later; their segments go once they have.
  const int64_t deadline = NowMs() + kWaitForRolesMs;
  while (true) {
    bool all_gone = true;
    for (int i = 0; i < count; ++i) all_gone = all_gone && !Alive(roles[i]);
    Sweep(prefix, prefix_size, roles, count);
    if (all_gone || NowMs() >= deadline) break;
    const timespec pause{0, 20 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  _exit(0);
}

}  // namespace

ShmJanitor::ShmJanitor(uint64_t job_id) {
  // "/psformer-<job>-" as the entry's name in /dev/shm, made before fork.
  const std::string prefix = ShmJobPrefix(job_id).substr(1);
  char prefix_copy[64] = {};
  std::memcpy(prefix_copy, prefix.data(), std::min(prefix.size(), sizeof(prefix_copy) - 1));
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    PSF_LOG(Warning) << "no janitor for the job's shared memory (socketpair: " << std::strerror(errno)
                     << "); if this supervisor is killed, the next train on this host removes its segments";
    return;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(ends[0]);
    RunJanitor(ends[1], prefix_copy, std::strlen(prefix_copy));
  }
  close(ends[1]);
  if (pid < 0) {
    PSF_LOG(Warning) << "no janitor for the job's shared memory (fork: " << std::strerror(errno)
                     << "); if this supervisor is killed, the next train on this host removes its segments";
    close(ends[0]);
    return;
  }
  fd_ = ends[0];
  pid_ = pid;
}

void ShmJanitor::Watch(pid_t role) {
  if (fd_ < 0 || role <= 0) return;
  send(fd_, &role, sizeof(role), MSG_NOSIGNAL);
}

void ShmJanitor::Done() {
  if (fd_ < 0) return;
  const pid_t done = kSupervisorDone;
  send(fd_, &done, sizeof(done), MSG_NOSIGNAL);
  close(fd_);
  fd_ = -1;
  // It exits on reading that; reaped here so that it leaves no zombie while this process lives.
  for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace psformer
