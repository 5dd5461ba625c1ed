#include "launcher/host_probe.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "launcher/child_process.h"

namespace psformer {
namespace {

// Starts the probe of `host` in a process group of its own (so that a late one is killed with
// every program it started); -1 when it cannot start.
pid_t StartProbe(const std::string& host, const HostProbeOptions& options) {
  std::vector<std::string> args;
  if (options.rsh_agent.empty()) {
    const long seconds = std::max<long>(1, std::chrono::duration_cast<std::chrono::seconds>(options.timeout).count());
    args = {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=" + std::to_string(seconds), host, "true"};
  } else {
    args = {options.rsh_agent, host, "true"};
  }
  ChildProcessOptions child;
  child.args = std::move(args);
  child.silence_output = true;
  return StartChildProcess(child);
}

}  // namespace

std::vector<bool> ProbeHosts(const std::vector<std::string>& hosts, const HostProbeOptions& options) {
  std::vector<pid_t> pids;
  for (const std::string& host : hosts) pids.push_back(StartProbe(host, options));
  std::vector<bool> answers(hosts.size(), false);
  std::vector<bool> done(hosts.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  size_t left = hosts.size();
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] < 0) {
      done[i] = true;
      --left;
    }
  }
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      answers[i] = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    kill(-pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
  }
  return answers;
}

}  // namespace psformer
