// Whether hosts answer, asked the way mpirun reaches them: a trivial command (`true`) run on each
// through ssh or the job's rsh agent, all at once, each given a bounded time. A host that cannot
// be reached, refuses the login or does not reply in time does not answer.
#ifndef PSFORMER_LAUNCHER_HOST_PROBE_H_
#define PSFORMER_LAUNCHER_HOST_PROBE_H_

#include <chrono>
#include <string>
#include <vector>

namespace psformer {

struct HostProbeOptions {
  // The program that runs "HOST COMMAND..." there: "" = ssh, with BatchMode (no password prompt)
  // and a connect timeout; else the job's rsh agent.
  std::string rsh_agent;
  std::chrono::milliseconds timeout{10000};  // per probe; all run at the same time
};

// One entry per host, in order: true when it answered. `why`, when given, gets one entry per
// host too: "" for one that answered, else why not, in a line (the last thing the probe said,
// such as ssh's "connect to host ... Connection refused", or its exit status, or no reply in
// time), so that a user can tell a host that is down from a login that is refused.
std::vector<bool> ProbeHosts(const std::vector<std::string>& hosts, const HostProbeOptions& options,
                             std::vector<std::string>* why = nullptr);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_HOST_PROBE_H_
