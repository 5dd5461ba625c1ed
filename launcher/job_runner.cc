#include "launcher/job_runner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "common/checkpoint/checkpoint_store.h"
#include "common/fault_plan.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/transport/curve_keys.h"
#include "common/transport/host_identity.h"
#include "common/transport/shm_segment.h"
#include "common/transport/van_factory.h"
#include "launcher/cluster_plan.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/role_process.h"
#include "launcher/supervisor_events.h"
#include "worker/backend/cuda/cuda_device.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// How long a stop waits for the workers to finish their step, and then for the servers to write
// their checkpoint, before it kills what is left.
constexpr std::chrono::seconds kWorkerStopTimeout{60};
constexpr std::chrono::seconds kServerStopTimeout{60};

// SIGINT and SIGTERM seen by this supervisor: the first stops the job in order, a second one
// kills what is still running.
std::atomic<int> g_interrupts{0};  // NOLINT: a signal handler can reach nothing else.
void OnInterrupt(int) { g_interrupts.fetch_add(1); }

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
  if (ec) return Status::IoError("cannot create " + options.run_dir + "/checkpoints: " + ec.message());
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

// Where a server listens and on which host it runs, as its workers decide how to reach it.
struct ServerAddress {
  std::string tcp;   // tcp://HOST:PORT, for workers of other hosts
  std::string ipc;   // ipc://RUN_DIR/ipc/pserver-S.sock for workers of its host; "" = none
  std::string host;  // SameHostIdentity() of its host
};

// A socket path longer than this does not fit a sockaddr_un (108 bytes with its terminator).
constexpr size_t kMaxIpcPathBytes = 100;

// The ipc:// endpoint of server `index` in the run directory, or "" when same-host shared memory
// is off or the path would be too long for a Unix socket (then workers use TCP, and a line says so).
std::string ServerIpcEndpoint(const JobOptions& options, int index) {
  if (!options.config.cluster().same_host_shm()) return "";
  std::error_code ec;
  const fs::path path = fs::absolute(fs::path(options.run_dir) / "ipc" / ("pserver-" + std::to_string(index) + ".sock"), ec);
  if (ec || path.string().size() > kMaxIpcPathBytes) {
    PSF_LOG(Warning) << "the run directory's path is too long for a Unix socket (" << path.string()
                     << "); workers reach server " << index << " over TCP, without shared memory";
    return "";
  }
  return "ipc://" + path.string();
}

// What a worker on host `my_host` connects to for each server: ipc:// where they share the host.
std::vector<std::string> WorkerServerEndpoints(const std::vector<ServerAddress>& servers, const std::string& my_host) {
  std::vector<std::string> endpoints;
  for (const ServerAddress& s : servers) endpoints.push_back(!s.ipc.empty() && SameHost(s.host, my_host) ? s.ipc : s.tcp);
  return endpoints;
}

RoleProcessOptions RoleOptions(const JobOptions& options, const RoleSlot& slot, const std::string& job_id,
                               const std::vector<ServerAddress>& server_addresses, const std::string& my_host) {
  const auto& cluster = options.config.cluster();
  const std::string config_path = (fs::path(options.run_dir) / "config.pbtxt").string();
  RoleProcessOptions role;
  role.name = slot.name();
  role.executable = options.executable;
  role.log_file = (fs::path(options.run_dir) / "logs" / (slot.name() + ".log")).string();
  role.heartbeat_timeout_ms = cluster.heartbeat_timeout_ms();
  role.max_restarts = cluster.max_restarts();
  role.restart_backoff_ms = cluster.restart_backoff_ms();
  role.reports_ready = true;
  std::string servers;
  for (const std::string& e : WorkerServerEndpoints(server_addresses, my_host)) {
    servers += (servers.empty() ? "" : ",") + e;
  }
  if (slot.kind == RoleSlot::Kind::kServer) {
    const ServerAddress& me = server_addresses[slot.index];
    role.args = {"pserver",
                 "--config",
                 config_path,
                 "--run-dir",
                 options.run_dir,
                 "--index",
                 std::to_string(slot.index),
                 "--endpoint",
                 me.tcp,
                 "--job-id",
                 job_id};
    if (!me.ipc.empty()) {
      role.args.push_back("--ipc-endpoint");
      role.args.push_back(me.ipc);
    }
  } else {
    role.args = {
        "worker",    "--config", config_path, "--run-dir", options.run_dir, "--index", std::to_string(slot.index),
        "--servers", servers,    "--job-id",  job_id};
    if (slot.local_gpu >= 0) {
      role.args.push_back("--gpu");
      role.args.push_back(std::to_string(slot.local_gpu));
    }
  }
  if (options.resume) role.args.push_back("--resume");
  auto restart_environment = RestartEnvironment(options.config.fault());
  PSF_CHECK(restart_environment.ok());  // validated with the config
  role.restart_environment = std::move(*restart_environment);
  if (cluster.same_host_shm()) role.environment.push_back(std::string(kShmJobVariable) + "=" + job_id);
  if (!options.curve_keys.empty()) {
    // Each role gets only its side's secret, in its environment (never on its command line).
    auto keys = DecodeCurveKeys(options.curve_keys);
    PSF_CHECK(keys.ok());
    const CurveKeys share = slot.kind == RoleSlot::Kind::kServer ? keys->ForServer() : keys->ForClient();
    role.environment.push_back(std::string(kCurveKeysVariable) + "=" + EncodeCurveKeys(share));
  }
  return role;
}

// A role process and what it is, so that a stop can go in order.
struct SupervisedRole {
  RoleSlot::Kind kind;
  std::unique_ptr<RoleProcess> process;
};

// Stops the roles of `kind` (SIGTERM) while the others stay supervised, waiting at most `timeout`
// (or until another Ctrl-C) before killing the rest. True when every one of them exited 0.
bool StopRoles(std::vector<SupervisedRole>& roles, RoleSlot::Kind kind, std::chrono::seconds timeout) {
  const int interrupts = g_interrupts.load();
  for (auto& role : roles) {
    if (role.kind == kind) role.process->RequestStop(SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    bool all_finished = true;
    for (auto& role : roles) {
      role.process->Poll();
      if (role.kind == kind) all_finished = all_finished && role.process->finished();
    }
    if (all_finished) break;
    if (std::chrono::steady_clock::now() >= deadline || g_interrupts.load() > interrupts) {
      for (auto& role : roles) {
        if (role.kind != kind || role.process->finished()) continue;
        PSF_LOG(Warning) << role.process->name() << " did not stop in time; killing it";
        role.process->Kill();
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool clean = true;
  for (auto& role : roles) {
    if (role.kind == kind) clean = clean && role.process->state() == RoleProcess::State::kSucceeded;
  }
  return clean;
}

// The newest checkpoint of the run with its manifest (complete), as a path; "none" if none.
std::string NewestCompleteCheckpoint(const std::string& run_dir) {
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    const fs::path dir = CheckpointDir(run_dir, step);
    std::error_code ec;
    if (fs::exists(dir / "manifest.pbtxt", ec)) return dir.string();
  }
  return "none";
}

// Says each checkpoint failure a role reported on the console (not in the role's log alone: a
// crash later would lose everything since the last checkpoint); returns how many there were.
int ReportCheckpointFailures(std::vector<SupervisedRole>& roles) {
  int failures = 0;
  for (auto& role : roles) {
    for (const std::string& failure : role.process->TakeCheckpointFailures()) {
      std::cerr << "psformer train: warning: " << failure << "\n";
      ++failures;
    }
  }
  return failures;
}

// Notes each restart a role's supervisor decided in TensorBoard (the logs have them already).
void NoteRestarts(std::vector<SupervisedRole>& roles, SupervisorEvents* events) {
  for (auto& role : roles) {
    for (const std::string& restart : role.process->TakeRestarts()) events->Note(restart);
  }
}

// Polls the roles until every one finished (0, or 1 when checkpoints failed on the way), one
// failed for good (1), or Ctrl-C / SIGTERM (130): then the workers finish the step they are in
// and exit, and after them the servers, which write a checkpoint of the step every shard applied
// (docs/failure-model.md). In cluster mode each rank holds one role; `after_workers_stopped`
// (if set) waits there until every rank's workers have stopped, so that the servers of the
// whole job stop after all of them. Checkpoint failures are said on the console as they come.
int Supervise(std::vector<SupervisedRole>& roles, const std::string& run_dir, SupervisorEvents* events,
              const std::function<void()>& after_workers_stopped = nullptr) {
  g_interrupts.store(0);
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  for (auto& role : roles) {
    const Status started = role.process->Start();
    if (!started.ok()) {
      PSF_LOG(Error) << role.process->name() << ": " << started.message();
      return 1;
    }
  }
  int checkpoint_failures = 0;
  while (true) {
    checkpoint_failures += ReportCheckpointFailures(roles);
    NoteRestarts(roles, events);
    if (g_interrupts.load() != 0) {
      PSF_LOG(Warning) << "interrupted; stopping the workers after their current step, then the servers";
      std::cerr << "psformer train: interrupted; workers finish their step, then servers write a checkpoint "
                   "(interrupt again to kill at once)\n";
      const bool workers_clean = StopRoles(roles, RoleSlot::Kind::kWorker, kWorkerStopTimeout);
      if (after_workers_stopped) after_workers_stopped();
      const bool servers_clean = StopRoles(roles, RoleSlot::Kind::kServer, kServerStopTimeout);
      if (!workers_clean || !servers_clean) {
        std::cerr << "psformer train: warning: not every role process stopped cleanly (see the run's logs/); "
                     "--resume continues from the newest complete checkpoint\n";
      }
      return 130;
    }
    bool all_done = true;
    for (auto& role : roles) {
      const RoleProcess::State state = role.process->Poll();
      if (state == RoleProcess::State::kFailed) {
        std::cerr << "psformer train: error: " << role.process->failure() << "\n";
        for (auto& other : roles) other.process->Kill();
        return 1;
      }
      all_done = all_done && state == RoleProcess::State::kSucceeded;
    }
    if (all_done) {
      checkpoint_failures += ReportCheckpointFailures(roles);
      if (checkpoint_failures == 0) return 0;
      // The model was written, but the run lacks checkpoints its config asked for.
      std::cerr << "psformer train: error: training finished, but " << checkpoint_failures
                << " checkpoint(s) could not be written (see above); last good checkpoint: "
                << NewestCompleteCheckpoint(run_dir) << "\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Removes this user's shared-memory segments whose creators are gone: what a job killed together
// with its supervisor left in /dev/shm.
void SweepOrphanSegments() {
  if (const int n = RemoveOrphanShmSegments(); n > 0) {
    PSF_LOG(Info) << "removed " << n << " shared-memory segment(s) left in /dev/shm by processes that no longer exist";
  }
}

// Says where the job's shared memory lives, so that an operator (or a test) can look for it.
void LogJobSegments(const JobOptions& options, const std::string& job_id) {
  if (!options.config.cluster().same_host_shm()) return;
  PSF_LOG(Info) << "same-host payloads travel through shared memory: /dev/shm" << ShmJobPrefix(std::stoull(job_id))
                << "* (removed when the job ends; cluster.same_host_shm = false turns it off)";
}

// Removes every segment of the job on this host once its role processes are gone.
void RemoveJobSegments(const std::string& job_id) {
  const int n = RemoveShmSegments(std::stoull(job_id), std::nullopt);
  if (n > 0) PSF_LOG(Info) << "removed " << n << " shared-memory segment(s) the job's processes left";
}

int Fail(const std::string& message) {
  std::cerr << "psformer train: error: " << message << "\n";
  return 1;
}

// The command that continues an interrupted run: the run directory holds the resolved config.
std::string ResumeCommand(const std::string& run_dir) {
  const std::string config = (fs::path(run_dir) / "config.pbtxt").string();
  return "psformer train --config " + config + " --run-dir " + run_dir + " --resume";
}

std::string NewJobId() {
  std::random_device rd;
  return std::to_string((static_cast<uint64_t>(rd()) << 32) | rd());
}

// Fresh CURVE keys for a job as text (JobOptions::curve_keys); "" when cluster.authenticate is off.
StatusOr<std::string> NewJobKeys(const JobConfig& config) {
  if (!config.cluster().authenticate()) return std::string();
  PSF_ASSIGN_OR_RETURN(const CurveKeys keys, GenerateCurveKeys());
  return EncodeCurveKeys(keys);
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
  JobOptions job = options;
  auto& cluster = *job.config.mutable_cluster();
  const std::string host = HostName();
  const int gpus = CudaDeviceCount();
  auto gpu_workers = ChooseGpuWorkers(cluster.backend(), {{host, gpus}});
  if (!gpu_workers.ok()) {
    return Fail("cluster.backend = CUDA but this machine (" + host + ") has no GPU (CUDA device count 0; " +
                CudaUnavailableReason() + "); set cluster.backend to CPU or AUTO");
  }
  // Role processes read the worker count from the run's config.pbtxt, so 0 is resolved here.
  if (cluster.workers() == 0) cluster.set_workers(*gpu_workers ? gpus : 1);
  ClusterPlanOptions plan_options;
  plan_options.servers = cluster.servers();
  plan_options.workers = cluster.workers();
  plan_options.gpu_workers = *gpu_workers;
  plan_options.gpus_per_host = {{host, gpus}};
  auto plan = ClusterPlan::Make(plan_options, std::vector<std::string>(cluster.servers() + cluster.workers(), host));
  if (!plan.ok()) return Fail(plan.status().message());
  // Ports before the run directory: a refused job leaves nothing behind.
  std::vector<std::string> endpoints;
  for (int s = 0; s < plan->servers(); ++s) {
    auto endpoint = ServerEndpoint(cluster, s, 1);
    if (!endpoint.ok()) return Fail(endpoint.status().message());
    endpoints.push_back(*endpoint);
  }
  if (Status s = PrepareRunDir(job); !s.ok()) return Fail(s.message());
  // The supervisor's lines still reach stderr without the file; say why it is missing.
  if (Status s = SetLogFile((fs::path(job.run_dir) / "logs" / "supervisor.log").string()); !s.ok()) {
    PSF_LOG(Warning) << "no supervisor log file: " << s.message();
  }
  const std::string job_id = NewJobId();
  auto keys = NewJobKeys(job.config);
  if (!keys.ok()) return Fail(keys.status().message());
  job.curve_keys = *keys;
  // Every role runs here: each worker reaches each server over ipc:// and shared memory.
  const std::string host_identity = SameHostIdentity();
  std::vector<ServerAddress> addresses;
  for (int s = 0; s < plan->servers(); ++s) addresses.push_back({endpoints[s], ServerIpcEndpoint(job, s), host_identity});
  SweepOrphanSegments();
  LogJobSegments(job, job_id);
  std::vector<SupervisedRole> roles;
  for (const RoleSlot& slot : plan->slots()) {
    roles.push_back({slot.kind, std::make_unique<RoleProcess>(RoleOptions(job, slot, job_id, addresses, host_identity))});
  }
  PSF_LOG(Info) << "single-node job: " << plan->servers() << " server(s), " << plan->workers() << " worker(s) on "
                << (*gpu_workers ? "GPUs" : "CPU") << "; run directory " << job.run_dir;
  SupervisorEvents events(job.run_dir, job.config.logging().tensorboard());
  const int status = Supervise(roles, job.run_dir, &events);
  roles.clear();  // every role process is gone
  RemoveJobSegments(job_id);
  if (status == 130) std::cerr << "psformer train: interrupted; continue with: " << ResumeCommand(job.run_dir) << "\n";
  return status;
}

int RunClusterRank(const JobOptions& options) {
  MpiBootstrap mpi;
  SetLogTag("supervisor-" + std::to_string(mpi.rank()));
  // Every rank reports its host and the GPUs it sees there: "HOST GPUS".
  auto reports = mpi.AllGather(HostName() + " " + std::to_string(CudaDeviceCount()));
  if (!reports.ok()) mpi.Abort(1);
  std::vector<std::string> hosts;
  std::vector<std::pair<std::string, int>> gpus_per_host;
  for (const std::string& report : *reports) {
    const size_t space = report.rfind(' ');
    hosts.push_back(report.substr(0, space));
    const bool seen =
        std::any_of(gpus_per_host.begin(), gpus_per_host.end(), [&](const auto& h) { return h.first == hosts.back(); });
    if (!seen) gpus_per_host.emplace_back(hosts.back(), std::stoi(report.substr(space + 1)));
  }
  // Every rank computes the same decisions from the same reports and fails the same way; rank 0
  // says why.
  auto fail_everywhere = [&](const std::string& message) {
    if (mpi.rank() == 0) std::cerr << "psformer train: error: " << message << "\n";
    return 1;
  };
  JobOptions local = options;
  auto& cluster = *local.config.mutable_cluster();
  auto gpu_workers = ChooseGpuWorkers(cluster.backend(), gpus_per_host);
  if (!gpu_workers.ok()) return fail_everywhere(gpu_workers.status().message());
  if (cluster.workers() == 0) {
    // Under mpirun the ranks say how many workers there are: every rank that is not a server.
    if (mpi.size() <= cluster.servers()) {
      return fail_everywhere("cluster.workers = 0 makes every rank that is not a server a worker, but " +
                             std::to_string(mpi.size()) + " rank(s) leave none beside cluster.servers (" +
                             std::to_string(cluster.servers()) + "); start more ranks (mpirun -np)");
    }
    cluster.set_workers(mpi.size() - cluster.servers());
  }
  ClusterPlanOptions plan_options;
  plan_options.servers = cluster.servers();
  plan_options.workers = cluster.workers();
  plan_options.gpu_workers = *gpu_workers;
  plan_options.gpus_per_host = gpus_per_host;
  auto plan = ClusterPlan::Make(plan_options, hosts);
  if (!plan.ok()) return fail_everywhere(plan.status().message());
  local.run_dir = mpi.Broadcast(options.run_dir);
  const std::string job_id = mpi.Broadcast(NewJobId());
  // Rank 0 makes the job's keys; MPI hands them to the other ranks (or rank 0's reason not to).
  auto keys = mpi.rank() == 0 ? NewJobKeys(local.config) : StatusOr<std::string>(std::string());
  local.curve_keys = mpi.Broadcast(keys.ok() ? *keys : "error: " + keys.status().message());
  if (local.curve_keys.rfind("error: ", 0) == 0) return fail_everywhere(local.curve_keys.substr(7));
  const Status prepared = PrepareRunDir(local);
  const RoleSlot& me = plan->slot(mpi.rank());
  std::string my_endpoint;
  Status endpoint_status = prepared;
  if (prepared.ok() && me.kind == RoleSlot::Kind::kServer) {
    auto endpoint = ServerEndpoint(cluster, me.index, plan->hosts());
    if (endpoint.ok()) my_endpoint = *endpoint;
    endpoint_status = endpoint.status();
  }
  if (!endpoint_status.ok()) {
    std::cerr << "psformer train: error: rank " << mpi.rank() << " (" << me.name() << " on " << me.host
              << "): " << endpoint_status.message() << "\n";
  }
  if (mpi.AllReduceMax(endpoint_status.ok() ? 0 : 1) != 0) return 1;
  auto all_endpoints = mpi.AllGather(my_endpoint);
  if (!all_endpoints.ok()) return 1;
  // Which ranks share a kernel and a network namespace (not just a host name: the cluster
  // simulator's hosts are namespaces of one kernel, and they talk TCP).
  const std::string host_identity = SameHostIdentity();
  auto identities = mpi.AllGather(host_identity);
  if (!identities.ok()) return 1;
  std::vector<std::string> server_endpoints;
  std::vector<ServerAddress> addresses;
  for (int s = 0; s < plan->servers(); ++s) {
    const int slot = plan->server(s).slot;
    server_endpoints.push_back((*all_endpoints)[slot]);
    addresses.push_back({(*all_endpoints)[slot], ServerIpcEndpoint(local, s), (*identities)[slot]});
  }
  const std::string log_file =
      (fs::path(local.run_dir) / "logs" / ("supervisor-" + std::to_string(mpi.rank()) + ".log")).string();
  if (Status s = SetLogFile(log_file); !s.ok()) PSF_LOG(Warning) << "no supervisor log file: " << s.message();
  std::string servers;
  for (const std::string& e : server_endpoints) servers += (servers.empty() ? "" : ",") + e;
  PSF_LOG(Info) << "rank " << mpi.rank() << " runs " << me.name() << " on host " << me.host << "; servers at "
                << servers;
  if (me.kind == RoleSlot::Kind::kWorker) {
    std::string reached;
    for (const std::string& e : WorkerServerEndpoints(addresses, host_identity)) {
      reached += (reached.empty() ? "" : ",") + e;
    }
    if (reached != servers) PSF_LOG(Info) << me.name() << " reaches the servers of its host over ipc: " << reached;
  }

  SweepOrphanSegments();
  LogJobSegments(local, job_id);
  std::vector<SupervisedRole> roles;
  roles.push_back({me.kind, std::make_unique<RoleProcess>(RoleOptions(local, me, job_id, addresses, host_identity))});
  // On Ctrl-C mpirun signals every rank; the server ranks wait for the worker ranks' stop (with
  // a bound: a rank that was not signalled never arrives) before stopping their servers.
  SupervisorEvents events(local.run_dir, local.config.logging().tensorboard());
  const int status = Supervise(roles, local.run_dir, &events, [&] {
    const bool all = mpi.BarrierWithin(kWorkerStopTimeout + std::chrono::seconds(30), [&] {
      for (auto& role : roles) role.process->Poll();
    });
    if (!all) PSF_LOG(Warning) << "not every rank stopped its workers in time; stopping the servers anyway";
  });
  if (status != 0 && status != 130) {
    // This rank's role cannot continue: the job cannot either. MPI_Abort ends every rank.
    std::cerr << "psformer train: error: rank " << mpi.rank() << " (" << me.name() << ") cannot continue; "
              << "aborting the job\n";
    mpi.Abort(status);
  }
  roles.clear();
  RemoveJobSegments(job_id);
  const int job_status = mpi.AllReduceMax(status);
  if (job_status == 130 && mpi.rank() == 0) {
    std::cerr << "psformer train: interrupted; continue with: mpirun ... " << ResumeCommand(local.run_dir) << "\n";
  }
  return job_status;
}

}  // namespace psformer
