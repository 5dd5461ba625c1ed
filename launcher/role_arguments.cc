#include "launcher/role_arguments.h"

#include <filesystem>
#include <sstream>
#include <string_view>

#include "common/config_loader.h"
#include "common/role_threads.h"
#include "common/run_directory_identity.h"
#include "common/trace.h"

namespace psformer {
namespace {

using Kind = RoleSlot::Kind;

// Option names without their leading "--", as Boost declares them.
constexpr char kConfig[] = "config";
constexpr char kRunDir[] = "run-dir";
constexpr char kIndex[] = "index";
constexpr char kEndpoint[] = "endpoint";
constexpr char kIpcEndpoint[] = "ipc-endpoint";
constexpr char kServers[] = "servers";
constexpr char kJobId[] = "job-id";
constexpr const char* kIncarnation = kIncarnationOption + 2;
constexpr char kGpu[] = "gpu";
constexpr char kThreads[] = "threads";
constexpr char kResume[] = "resume";
constexpr char kAggregator[] = "aggregator";

const char* CommandOf(Kind kind) {
  return kind == Kind::kServer ? "pserver" : kind == Kind::kWorker ? "worker" : "aggregator";
}

std::string Flag(const char* name) { return std::string("--") + name; }

// A list of endpoints is one argument, its items separated by commas. An ipc:// endpoint is a
// path under the run directory, which may hold a comma (or a '%'): inside an item these are
// written %2C and %25, as in a URI, and read back.
std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty()) continue;
    std::string decoded;
    for (size_t i = 0; i < part.size(); ++i) {
      const std::string_view code = std::string_view(part).substr(i + 1, 2);
      if (part[i] == '%' && (code == "2C" || code == "2c" || code == "25")) {
        decoded += code == "25" ? '%' : ',';
        i += 2;
      } else {
        decoded += part[i];
      }
    }
    parts.push_back(decoded);
  }
  return parts;
}

std::string JoinCommas(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) {
    if (!text.empty()) text += ',';
    for (char c : part) text += c == ',' ? "%2C" : c == '%' ? "%25" : std::string(1, c);
  }
  return text;
}

}  // namespace

std::vector<std::string> RoleArguments::ToArgs() const {
  const bool server = kind == Kind::kServer, worker = kind == Kind::kWorker;
  std::vector<std::string> args = {CommandOf(kind), Flag(kConfig), config, Flag(kRunDir), run_dir};
  args.insert(args.end(), {Flag(kIndex), std::to_string(index)});
  if (!worker) args.insert(args.end(), {Flag(kEndpoint), endpoint});
  if (server && !ipc_endpoint.empty()) args.insert(args.end(), {Flag(kIpcEndpoint), ipc_endpoint});
  if (!server) args.insert(args.end(), {Flag(kServers), JoinCommas(servers)});
  if (worker && !aggregator.empty()) args.insert(args.end(), {Flag(kAggregator), aggregator});
  args.insert(args.end(), {Flag(kJobId), std::to_string(job_id)});
  if (worker && gpu >= 0) args.insert(args.end(), {Flag(kGpu), std::to_string(gpu)});
  if (threads != 0) args.insert(args.end(), {Flag(kThreads), std::to_string(threads)});
  if (resume && kind != Kind::kAggregator) args.push_back(Flag(kResume));
  return args;
}

std::string RoleUsage(Kind kind) {
  if (kind == Kind::kAggregator) return "--config FILE --run-dir DIR --index G --endpoint E --servers E0,E1,...";
  return kind == Kind::kServer ? "--config FILE --run-dir DIR --index I --endpoint E"
                               : "--config FILE --run-dir DIR --index I --servers E0,E1,...";
}

void AddRoleOptions(Kind kind, po::options_description& options) {
  const bool server = kind == Kind::kServer;
  const char* index_help = server                    ? "this shard's index, 0 .. cluster.servers-1"
                           : kind == Kind::kWorker ? "this worker's index, 0 .. cluster.workers-1"
                                                   : "this host group's index (cluster.host_groups)";
  // clang-format off
  options.add_options()
      (kConfig, po::value<std::string>()->required(), "resolved job config (RUN_DIR/config.pbtxt)")
      (kRunDir, po::value<std::string>()->required(),
       server ? "run directory; checkpoints go to RUN_DIR/checkpoints" : "run directory")
      (kIndex, po::value<int>()->required(), index_help);
  if (kind == Kind::kAggregator) {
    options.add_options()(kEndpoint, po::value<std::string>()->required(),
                          "where the group's workers reach it: ipc://PATH (or tcp://HOST:PORT)");
    options.add_options()(kServers, po::value<std::string>()->required(),
                          "server endpoints in shard order, comma-separated (inside one, a comma is written %2C and a "
                          "% as %25)");
  } else if (server) {
    options.add_options()(kEndpoint, po::value<std::string>()->required(),
                          "where to listen: tcp://HOST:PORT (PORT 0 = any free port) or ipc://PATH");
    options.add_options()(kIpcEndpoint, po::value<std::string>()->default_value(""),
                          "also listen on ipc://PATH for workers of this host, whose payloads then travel through "
                          "shared memory (set by psformer train with cluster.same_host_shm)");
  } else {
    options.add_options()(kServers, po::value<std::string>()->required(),
                          "server endpoints in shard order, comma-separated (inside one, a comma is written %2C and a "
                          "% as %25)");
    options.add_options()(kAggregator, po::value<std::string>()->default_value(""),
                          "the endpoint of this worker's host group's aggregator, which its pushes and pulls go to "
                          "(host summing; set by psformer train)");
  }
  options.add_options()
      (kJobId, po::value<uint64_t>()->default_value(0), "job id shared by every process of the job")
      (kIncarnation, po::value<uint32_t>()->default_value(0), "restart count (set by the supervisor)")
      (kThreads, po::value<int>()->default_value(0),
       "threads for the passes over payloads (copies, checksums; a server's sums and Adam); 0 = "
       "cluster.threads_per_process, else a worker's share of the cores or (servers, aggregators) every core; "
       "psformer train gives each role process an equal share of its host's cores");
  if (server) {
    options.add_options()
        (kResume, po::bool_switch(), "start from the newest complete checkpoint in RUN_DIR, if any");
  } else if (kind == Kind::kWorker) {
    options.add_options()
        (kGpu, po::value<int>()->default_value(-1), "CUDA device ordinal; -1 = CPU backend")
        (kResume, po::bool_switch(), "accepted for symmetry with pserver: workers resume from the servers' step");
  }
  // clang-format on
}

RoleArguments ReadRoleArguments(Kind kind, const po::variables_map& values) {
  RoleArguments role;
  role.kind = kind;
  role.config = values[kConfig].as<std::string>();
  role.run_dir = values[kRunDir].as<std::string>();
  role.index = values[kIndex].as<int>();
  role.job_id = values[kJobId].as<uint64_t>();
  role.incarnation = values[kIncarnation].as<uint32_t>();
  role.threads = values[kThreads].as<int>();
  if (kind != Kind::kAggregator) role.resume = values[kResume].as<bool>();
  if (kind == Kind::kServer) {
    role.endpoint = values[kEndpoint].as<std::string>();
    role.ipc_endpoint = values[kIpcEndpoint].as<std::string>();
  } else if (kind == Kind::kWorker) {
    role.servers = SplitCommas(values[kServers].as<std::string>());
    role.aggregator = values[kAggregator].as<std::string>();
    role.gpu = values[kGpu].as<int>();
  } else {
    role.endpoint = values[kEndpoint].as<std::string>();
    role.servers = SplitCommas(values[kServers].as<std::string>());
  }
  return role;
}

RoleCommandLine ParseRoleCommandLine(Kind kind, const Args& args) {
  const std::string command = CommandOf(kind);
  RoleCommandLine line;
  po::options_description options(command + " options");
  AddRoleOptions(kind, options);
  ParsedOptions parsed = ParseOptions(command, RoleUsage(kind), args, options);
  if (parsed.exit_status) {
    line.exit_status = parsed.exit_status;
    return line;
  }
  line.arguments = ReadRoleArguments(kind, parsed.values);
  if (line.arguments.threads < 0) {
    line.exit_status =
        ReportError(command, "--threads " + std::to_string(line.arguments.threads) + " must be >= 0", kExitUsage);
    return line;
  }
  // Before any pool or transport is made (common/role_threads.h).
  SetPayloadThreads(line.arguments.threads);
  auto config = ResolveConfig(line.arguments.config, {});
  if (!config.ok()) {
    line.exit_status = ReportError(command, config.status());
    return line;
  }
  line.config = std::move(*config);
  const proto::ClusterConfig& cluster = line.config.cluster();
  const int roles = kind == Kind::kServer   ? cluster.servers()
                    : kind == Kind::kWorker ? cluster.workers()
                                            : cluster.host_groups_size();
  const char* field = kind == Kind::kServer   ? " (cluster.servers)"
                      : kind == Kind::kWorker ? " (cluster.workers)"
                                              : " (cluster.host_groups)";
  if (roles == 0) {
    // "outside 0..-1" would say nothing: there is no role of this kind to be.
    line.exit_status = ReportError(command,
                                   "the config " + line.arguments.config + " has no " +
                                       (kind == Kind::kAggregator ? "host groups (cluster.host_groups is empty: "
                                                                    "no aggregator runs)"
                                                                  : std::string("role of this kind") + field),
                                   kExitUsage);
    return line;
  }
  if (line.arguments.index < 0 || line.arguments.index >= roles) {
    line.exit_status = ReportError(
        command, "--index " + std::to_string(line.arguments.index) + " is outside 0.." + std::to_string(roles - 1) + field,
        kExitUsage);
    return line;
  }
  // Where the role writes its metrics, checkpoints and logs: psformer train and launch make it,
  // and a role started by hand must not find out only when it first writes.
  std::error_code ec;
  const std::string& run_dir = line.arguments.run_dir;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    line.exit_status =
        ReportError(command,
                    "--run-dir " + run_dir +
                        (std::filesystem::exists(run_dir, ec) ? " is not a directory" : ": no such directory") +
                        " (psformer train makes the run directory; a role started by hand needs "
                        "an existing one)",
                    kExitUsage);
    return line;
  }
  RememberRunDirectory(run_dir);  // no checkpoint goes into another directory of that name
  RoleSlot slot;
  slot.kind = kind;
  slot.index = line.arguments.index;
  if (Status traced = Trace::ConfigureFromEnvironment(line.arguments.run_dir, slot.name()); !traced.ok()) {
    line.exit_status = ReportError(command, traced, kExitUsage);
    return line;
  }
  if (kind == Kind::kWorker) return line;
  line.vocab = ResolvedVocabSize(line.config);
  if (line.vocab <= 0) {
    line.exit_status = ReportError(command,
                                   "model.vocab_size is 0 in " + line.arguments.config + ": a" +
                                       (kind == Kind::kServer ? " server" : "n aggregator") +
                                       " needs the resolved vocabulary size to know the parameter count",
                                   kExitUsage);
  }
  return line;
}

}  // namespace psformer
