// Starting a helper program (mpirun, a host probe) as `psformer launch` needs it: in a process
// group of its own, so that one kill(-pid) ends it with every program it started, and with stdin
// from /dev/null, so that it never reads the terminal.
#ifndef PSFORMER_LAUNCHER_CHILD_PROCESS_H_
#define PSFORMER_LAUNCHER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace psformer {

struct ChildProcessOptions {
  std::vector<std::string> args;  // args[0] is looked up in PATH
  bool silence_output = false;    // stdout and stderr to /dev/null too
  // Otherwise, where they go when not -1 (descriptors of this process, e.g. the write ends of
  // pipes it reads); else they are this process's.
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Starts "COMMAND: error: cannot run PROGRAM: reason", said on stderr when exec fails.
  std::string command = "psformer";
};

// Forks and execs the program; SIGINT and SIGTERM are at their defaults there. Returns its pid
// (also its process group), or -1 when fork failed. A program that cannot be executed exits
// with kExitExecFailed (launcher/exit_codes.h) after saying why on its stderr.
pid_t StartChildProcess(const ChildProcessOptions& options);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_CHILD_PROCESS_H_
