#include "launcher/mpirun_command.h"

#include <algorithm>

#include "common/transport/curve_keys.h"

namespace psformer {

std::vector<std::string> BuildMpirunCommand(const MpirunOptions& options) {
  std::vector<std::string> line = {options.mpirun};
  if (options.as_root) line.push_back("--allow-run-as-root");
  std::string hosts;
  for (const HostSlots& h : options.hosts) {
    hosts += (hosts.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  }
  // --map-by slot fills a host's slots before the next host's, so the servers, which take their
  // host's highest rank, sit beside that host's workers. --bind-to none: each rank supervises a
  // role process with threads of its own, and Open MPI's default binding would pin every rank
  // of a host, and so its role process, to one core.
  line.insert(line.end(),
              {"-np", std::to_string(options.processes), "--host", hosts, "--map-by", "slot", "--bind-to", "none"});
  if (options.rsh_agent.empty()) {
    line.insert(line.end(), {"--mca", "plm_rsh_args", "-o ConnectTimeout=10 -o BatchMode=yes"});
  } else {
    line.insert(line.end(), {"--mca", "plm_rsh_agent", options.rsh_agent});
  }
  if (!options.network.empty()) {
    line.insert(line.end(),
                {"--mca", "oob_tcp_if_include", options.network, "--mca", "btl_tcp_if_include", options.network});
  }
  for (const std::string& name : options.forward_environment) line.insert(line.end(), {"-x", name});
  line.insert(line.end(), options.program.begin(), options.program.end());
  return line;
}

std::vector<std::string> EnvironmentToForward(const std::vector<std::string>& environment) {
  static const std::vector<std::string> kNamed = {"PATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                  "CUDA_VISIBLE_DEVICES"};
  std::vector<std::string> names;
  for (const std::string& entry : environment) {
    const std::string name = entry.substr(0, entry.find('='));
    const bool named = std::find(kNamed.begin(), kNamed.end(), name) != kNamed.end();
    // The heartbeat descriptor belongs to one supervised process, the keys to one job.
    const bool ours = name.rfind("PSFORMER_", 0) == 0 && name != kCurveKeysVariable && name != "PSFORMER_HEARTBEAT_FD";
    if (named || ours) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ShellQuote(const std::vector<std::string>& args) {
  std::string line;
  for (const std::string& arg : args) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string("-_./:=,@%+").find(c) != std::string::npos;
    });
    if (plain) {
      line += arg;
      continue;
    }
    line += '\'';
    for (char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace psformer
