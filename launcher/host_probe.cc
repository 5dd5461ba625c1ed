#include "launcher/host_probe.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <thread>

#include "launcher/child_process.h"

namespace psformer {
namespace {

struct Probe {
  pid_t pid = -1;
  int output = -1;      // what it says (stdout and stderr), in a memory file read once it ends
  int start_error = 0;  // errno when it could not start
  std::string command;
};

// Starts the probe of `host` in a process group of its own (so that a late one is killed with
// every program it started); its pid is -1 when it cannot start.
Probe StartProbe(const std::string& host, const HostProbeOptions& options) {
  std::vector<std::string> args;
  if (options.rsh_agent.empty()) {
    const long seconds = std::max<long>(1, std::chrono::duration_cast<std::chrono::seconds>(options.timeout).count());
    args = {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=" + std::to_string(seconds), host, "true"};
  } else {
    args = {options.rsh_agent, host, "true"};
  }
  Probe probe;
  probe.command = (options.rsh_agent.empty() ? std::string("ssh") : options.rsh_agent) + " " + host + " true";
  probe.output = memfd_create("psformer-host-probe", MFD_CLOEXEC);
  ChildProcessOptions child;
  child.args = std::move(args);
  child.silence_output = probe.output < 0;
  child.stdout_fd = probe.output;
  child.stderr_fd = probe.output;
  probe.pid = StartChildProcess(child);
  if (probe.pid < 0) probe.start_error = errno;
  return probe;
}

// The last line with text of what the probe said, at most 300 characters; "" if none.
std::string LastLine(int fd) {
  if (fd < 0) return "";
  std::string text(16384, '\0');
  const off_t size = lseek(fd, 0, SEEK_END);
  const off_t from = size > static_cast<off_t>(text.size()) ? size - static_cast<off_t>(text.size()) : 0;
  const ssize_t n = pread(fd, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  const size_t newline = text.find_last_of("\r\n");
  std::string line = newline == std::string::npos ? text : text.substr(newline + 1);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  if (line.size() > 300) line = line.substr(0, 297) + "...";
  return line;
}

std::string WhyNot(const Probe& probe, int status) {
  const std::string said = LastLine(probe.output);
  if (!said.empty()) return said;
  if (WIFSIGNALED(status)) return "'" + probe.command + "' ended by signal " + std::to_string(WTERMSIG(status));
  return "'" + probe.command + "' exited with status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

std::vector<bool> ProbeHosts(const std::vector<std::string>& hosts, const HostProbeOptions& options,
                             std::vector<std::string>* why) {
  std::vector<Probe> probes;
  for (const std::string& host : hosts) probes.push_back(StartProbe(host, options));
  std::vector<bool> answers(hosts.size(), false);
  std::vector<std::string> reasons(hosts.size());
  std::vector<bool> done(hosts.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  size_t left = hosts.size();
  for (size_t i = 0; i < probes.size(); ++i) {
    if (probes[i].pid < 0) {
      done[i] = true;
      reasons[i] = "could not start '" + probes[i].command + "': " + std::strerror(probes[i].start_error);
      --left;
    }
  }
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < probes.size(); ++i) {
      int status = 0;
      if (done[i] || waitpid(probes[i].pid, &status, WNOHANG) != probes[i].pid) continue;
      done[i] = true;
      --left;
      answers[i] = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!answers[i]) reasons[i] = WhyNot(probes[i], status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    if (!done[i]) {
      kill(-probes[i].pid, SIGKILL);
      waitpid(probes[i].pid, nullptr, 0);
      const long ms = static_cast<long>(options.timeout.count());
      reasons[i] = "no reply to '" + probes[i].command + "' within " +
                   (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms");
    }
    if (probes[i].output >= 0) close(probes[i].output);
  }
  if (why != nullptr) *why = std::move(reasons);
  return answers;
}

}  // namespace psformer
