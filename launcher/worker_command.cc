// `psformer worker`: one worker role process, normally started by a supervisor
// (launcher/job_runner.h) with the resolved config of the run directory.
#include <signal.h>

#include <sstream>

#include "common/config_loader.h"
#include "common/heartbeat.h"
#include "common/logging.h"
#include "launcher/command_line.h"
#include "worker/worker_loop.h"

namespace psformer {
namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

}  // namespace

int RunWorkerCommand(const Args& args) {
  po::options_description options("worker options");
  options.add_options()
      ("config", po::value<std::string>()->required(), "resolved job config (RUN_DIR/config.pbtxt)")
      ("run-dir", po::value<std::string>()->required(), "run directory")
      ("index", po::value<int>()->required(), "this worker's index, 0 .. cluster.workers-1")
      ("servers", po::value<std::string>()->required(), "server endpoints in shard order, comma-separated")
      ("job-id", po::value<uint64_t>()->default_value(0), "job id shared by every process of the job")
      ("incarnation", po::value<uint32_t>()->default_value(0), "restart count (set by the supervisor)")
      ("gpu", po::value<int>()->default_value(-1), "CUDA device ordinal; -1 = CPU backend")
      ("resume", po::bool_switch(), "accepted for symmetry with pserver: workers resume from the servers' step");
  ParsedOptions parsed = ParseOptions("worker", "--config FILE --run-dir DIR --index I --servers E0,E1,...",
                                      args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  const auto& v = parsed.values;

  auto config = ResolveConfig(v["config"].as<std::string>(), {});
  if (!config.ok()) return ReportError("worker", config.status());
  WorkerOptions worker;
  worker.config = *config;
  worker.index = v["index"].as<int>();
  worker.servers = SplitCommas(v["servers"].as<std::string>());
  worker.job_id = v["job-id"].as<uint64_t>();
  worker.incarnation = v["incarnation"].as<uint32_t>();
  worker.run_dir = v["run-dir"].as<std::string>();
  worker.gpu = v["gpu"].as<int>();
  if (worker.index < 0 || worker.index >= config->cluster().workers()) {
    return ReportError("worker", "--index " + std::to_string(worker.index) + " is outside 0.." +
                                     std::to_string(config->cluster().workers() - 1) + " (cluster.workers)", 2);
  }
  if (static_cast<int>(worker.servers.size()) != config->cluster().servers()) {
    return ReportError("worker", "--servers names " + std::to_string(worker.servers.size()) +
                                     " endpoint(s) but cluster.servers is " +
                                     std::to_string(config->cluster().servers()), 2);
  }
  SetLogTag("worker-" + std::to_string(worker.index));
  SetLogLevel(static_cast<LogLevel>(config->logging().level()));
  HeartbeatSender heartbeat(config->cluster().heartbeat_interval_ms());
  // SIGTERM (the job is being interrupted): finish the step in hand, then exit 0.
  signal(SIGTERM, [](int) { RequestWorkerStop(); });
  const Status status = RunWorker(worker);
  if (!status.ok()) return ReportError("worker", status);
  return 0;
}

}  // namespace psformer
