#include "launcher/job_runner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "common/logging.h"
#include "common/model_file.h"
#include "launcher/cluster_plan.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/role_process.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_interrupted{0};
void OnInterrupt(int signal) { g_interrupted.store(signal); }

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

bool IsWildcard(const std::string& host) { return host == "0.0.0.0" || host == "*" || host.empty(); }

// Binds a TCP socket to host:port (port 0 = any free port) and returns the port it got; the
// socket is closed again, so the role process can bind the same port right after.
StatusOr<int> ReservePort(const std::string& host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::IoError("cannot create a socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (IsWildcard(host)) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return Status::InvalidArgument("cluster.bind_host = \"" + host + "\": not an IPv4 address");
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return Status::Unavailable("cannot bind " + host + ":" + std::to_string(port) + ": " + strerror(err) +
                               (err == EADDRINUSE ? " (the port is in use; choose another cluster.base_port)" : ""));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

Status PrepareRunDir(const JobOptions& options) {
  std::error_code ec;
  fs::create_directories(fs::path(options.run_dir) / "logs", ec);
  if (ec) return Status::IoError("cannot create run directory " + options.run_dir + ": " + ec.message());
  fs::create_directories(fs::path(options.run_dir) / "checkpoints", ec);
  return WriteFileAtomically((fs::path(options.run_dir) / "config.pbtxt").string(), ConfigToText(options.config));
}

// The endpoint server `index` binds, as workers reach it.
StatusOr<std::string> ServerEndpoint(const proto::ClusterConfig& cluster, int index, int hosts) {
  if (hosts > 1 && cluster.bind_host().rfind("127.", 0) == 0) {
    return Status::InvalidArgument("cluster.bind_host = \"" + cluster.bind_host() +
                                   "\" cannot be reached from other hosts; set it to this network's interface "
                                   "address or 0.0.0.0");
  }
  const int wanted = cluster.base_port() == 0 ? 0 : cluster.base_port() + index;
  PSF_ASSIGN_OR_RETURN(const int port, ReservePort(cluster.bind_host(), wanted));
  const std::string host = IsWildcard(cluster.bind_host()) ? HostName() : cluster.bind_host();
  return "tcp://" + host + ":" + std::to_string(port);
}

RoleProcessOptions RoleOptions(const JobOptions& options, const RoleSlot& slot, const std::string& job_id,
                               const std::vector<std::string>& server_endpoints) {
  const auto& cluster = options.config.cluster();
  const std::string config_path = (fs::path(options.run_dir) / "config.pbtxt").string();
  RoleProcessOptions role;
  role.name = slot.name();
  role.executable = options.executable;
  role.log_file = (fs::path(options.run_dir) / "logs" / (slot.name() + ".log")).string();
  role.heartbeat_timeout_ms = cluster.heartbeat_timeout_ms();
  role.max_restarts = cluster.max_restarts();
  role.restart_backoff_ms = cluster.restart_backoff_ms();
  std::string servers;
  for (const std::string& e : server_endpoints) servers += (servers.empty() ? "" : ",") + e;
  if (slot.kind == RoleSlot::Kind::kServer) {
    role.args = {"pserver", "--config", config_path, "--run-dir", options.run_dir, "--index",
                 std::to_string(slot.index), "--endpoint", server_endpoints[slot.index], "--job-id", job_id};
  } else {
    role.args = {"worker", "--config", config_path, "--run-dir", options.run_dir, "--index",
                 std::to_string(slot.index), "--servers", servers, "--job-id", job_id};
    if (slot.local_gpu >= 0) {
      role.args.push_back("--gpu");
      role.args.push_back(std::to_string(slot.local_gpu));
    }
  }
  if (options.resume) role.args.push_back("--resume");
  return role;
}

// Polls the roles until every one finished (0), one failed for good (1), or Ctrl-C (130).
int Supervise(std::vector<std::unique_ptr<RoleProcess>>& roles) {
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  for (auto& role : roles) {
    const Status started = role->Start();
    if (!started.ok()) {
      PSF_LOG(Error) << role->name() << ": " << started.message();
      return 1;
    }
  }
  while (true) {
    if (g_interrupted.load() != 0) {
      PSF_LOG(Warning) << "interrupted; stopping " << roles.size() << " role process(es)";
      for (auto& role : roles) role->Signal(SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      for (auto& role : roles) role->Kill();
      return 130;
    }
    bool all_done = true;
    for (auto& role : roles) {
      const RoleProcess::State state = role->Poll();
      if (state == RoleProcess::State::kFailed) {
        std::cerr << "psformer train: error: " << role->failure() << "\n";
        for (auto& other : roles) other->Kill();
        return 1;
      }
      all_done = all_done && state == RoleProcess::State::kSucceeded;
    }
    if (all_done) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string NewJobId() {
  std::random_device rd;
  return std::to_string((static_cast<uint64_t>(rd()) << 32) | rd());
}

}  // namespace

std::string DefaultRunDir(const JobConfig& config) {
  const std::time_t now = std::time(nullptr);
  tm local;
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return "runs/" + config.name() + "-" + stamp;
}

int RunSingleNode(const JobOptions& options) {
  const auto& cluster = options.config.cluster();
  const int hosts_count = cluster.servers() + cluster.workers();
  ClusterPlanOptions plan_options;
  plan_options.servers = cluster.servers();
  plan_options.workers = cluster.workers();
  auto plan = ClusterPlan::Make(plan_options, std::vector<std::string>(hosts_count, HostName()));
  if (!plan.ok()) return std::cerr << "psformer train: error: " << plan.status().message() << "\n", 1;
  if (Status s = PrepareRunDir(options); !s.ok()) return std::cerr << "psformer train: error: " << s.message() << "\n", 1;
  SetLogFile((fs::path(options.run_dir) / "logs" / "supervisor.log").string());
  std::vector<std::string> endpoints;
  for (int s = 0; s < plan->servers(); ++s) {
    auto endpoint = ServerEndpoint(cluster, s, 1);
    if (!endpoint.ok()) return std::cerr << "psformer train: error: " << endpoint.status().message() << "\n", 1;
    endpoints.push_back(*endpoint);
  }
  const std::string job_id = NewJobId();
  std::vector<std::unique_ptr<RoleProcess>> roles;
  for (const RoleSlot& slot : plan->slots()) {
    roles.push_back(std::make_unique<RoleProcess>(RoleOptions(options, slot, job_id, endpoints)));
  }
  PSF_LOG(Info) << "single-node job: " << plan->servers() << " server(s), " << plan->workers()
                << " worker(s); run directory " << options.run_dir;
  return Supervise(roles);
}

int RunClusterRank(const JobOptions& options) {
  MpiBootstrap mpi;
  const auto& cluster = options.config.cluster();
  SetLogTag("supervisor-" + std::to_string(mpi.rank()));
  auto hosts = mpi.AllGather(HostName());
  if (!hosts.ok()) mpi.Abort(1);
  ClusterPlanOptions plan_options;
  plan_options.servers = cluster.servers();
  plan_options.workers = cluster.workers();
  auto plan = ClusterPlan::Make(plan_options, *hosts);
  if (!plan.ok()) {
    // Every rank computed the same plan and fails the same way; rank 0 says why.
    if (mpi.rank() == 0) std::cerr << "psformer train: error: " << plan.status().message() << "\n";
    return 1;
  }
  JobOptions local = options;
  local.run_dir = mpi.Broadcast(options.run_dir);
  const std::string job_id = mpi.Broadcast(NewJobId());
  const Status prepared = PrepareRunDir(local);
  const RoleSlot& me = plan->slot(mpi.rank());
  std::string my_endpoint;
  Status endpoint_status = prepared;
  if (prepared.ok() && me.kind == RoleSlot::Kind::kServer) {
    auto endpoint = ServerEndpoint(cluster, me.index, plan->hosts());
    if (endpoint.ok()) my_endpoint = *endpoint;
    endpoint_status = endpoint.status();
  }
  if (!endpoint_status.ok()) std::cerr << "psformer train: error: rank " << mpi.rank() << ": " << endpoint_status.message() << "\n";
  if (mpi.AllReduceMax(endpoint_status.ok() ? 0 : 1) != 0) return 1;
  auto all_endpoints = mpi.AllGather(my_endpoint);
  if (!all_endpoints.ok()) return 1;
  std::vector<std::string> server_endpoints;
  for (int s = 0; s < plan->servers(); ++s) server_endpoints.push_back((*all_endpoints)[plan->server(s).slot]);
  SetLogFile((fs::path(local.run_dir) / "logs" / ("supervisor-" + std::to_string(mpi.rank()) + ".log")).string());

  std::vector<std::unique_ptr<RoleProcess>> roles;
  roles.push_back(std::make_unique<RoleProcess>(RoleOptions(local, me, job_id, server_endpoints)));
  const int status = Supervise(roles);
  if (status != 0 && status != 130) {
    // This rank's role cannot continue: the job cannot either. MPI_Abort ends every rank.
    std::cerr << "psformer train: error: rank " << mpi.rank() << " (" << me.name() << ") cannot continue; "
              << "aborting the job\n";
    mpi.Abort(status);
  }
  return mpi.AllReduceMax(status);
}

}  // namespace psformer
