#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "launcher/exit_codes.h"

namespace psformer {

pid_t StartChildProcess(const ChildProcessOptions& options) {
  std::vector<std::string> args = options.args;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, STDIN_FILENO);
      if (options.silence_output) {
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
      }
    }
    if (!options.silence_output && options.stdout_fd >= 0) dup2(options.stdout_fd, STDOUT_FILENO);
    if (!options.silence_output && options.stderr_fd >= 0) dup2(options.stderr_fd, STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "%s: error: cannot run %s: %s\n", options.command.c_str(), argv[0], strerror(errno));
    _exit(kExitExecFailed);
  }
  // Also here: a kill(-pid) right after the fork must not find the group missing.
  if (pid > 0) setpgid(pid, pid);
  return pid;
}

}  // namespace psformer
