// The mpirun command line of a cluster job, as `psformer launch` runs it: one rank per process
// slot of the chosen hosts, filled host by host, with the options a person would otherwise have
// to know (docs/launching.md). A pure function of its options, so it is tested as text.
#ifndef PSFORMER_LAUNCHER_MPIRUN_COMMAND_H_
#define PSFORMER_LAUNCHER_MPIRUN_COMMAND_H_

#include <string>
#include <vector>

#include "launcher/hostfile.h"

namespace psformer {

struct MpirunOptions {
  std::string mpirun = "mpirun";
  int processes = 1;             // -np
  std::vector<HostSlots> hosts;  // where, in order; their slots hold `processes`
  bool as_root = false;          // adds --allow-run-as-root (Open MPI refuses root without it)
  // How mpirun reaches the hosts: "" = ssh, with options that make an unreachable host fail in
  // seconds instead of ssh's minutes and never wait for a password; else a program used in place
  // of ssh (--mca plm_rsh_agent), given "HOST COMMAND...".
  std::string rsh_agent;
  // The network (CIDR, e.g. 10.1.0.0/16, or an interface name) Open MPI's own traffic uses; "" =
  // Open MPI's choice. On hosts with several interfaces the wrong one makes the bootstrap hang.
  std::string network;
  // Environment variables forwarded to every rank by name (-x NAME): values never appear on the
  // command line.
  std::vector<std::string> forward_environment;
  std::vector<std::string> program;  // the psformer binary and its arguments
};

// The command line, argv style.
std::vector<std::string> BuildMpirunCommand(const MpirunOptions& options);

// The names of the variables in `environment` ("NAME=value" entries) a rank needs from the
// launching shell: PATH and LD_LIBRARY_PATH (where the binaries and libraries are), the thread
// counts of OpenMP / OpenBLAS, CUDA_VISIBLE_DEVICES, and PSFORMER_* except the job's keys, which
// the ranks make themselves.
std::vector<std::string> EnvironmentToForward(const std::vector<std::string>& environment);

// `args` as one line a POSIX shell reads back to the same words.
std::string ShellQuote(const std::vector<std::string>& args);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_MPIRUN_COMMAND_H_
