#include "launcher/job_runner.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>

#include "common/fault_plan.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/transport/curve_keys.h"
#include "common/transport/host_identity.h"
#include "common/transport/van_factory.h"
#include "common/write_file.h"
#include "launcher/cluster_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/port_reservation.h"
#include "launcher/role_arguments.h"
#include "launcher/role_supervisor.h"
#include "launcher/same_host_path.h"
#include "launcher/supervisor_events.h"
#include "worker/backend/backend_factory.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

Status PrepareRunDir(const JobOptions& options) {
  std::error_code ec;
  fs::create_directories(fs::path(options.run_dir) / "logs", ec);
  if (ec) return Status::IoError("cannot create run directory " + options.run_dir + ": " + ec.message());
  fs::create_directories(fs::path(options.run_dir) / "checkpoints", ec);
  if (ec) return Status::IoError("cannot create " + options.run_dir + "/checkpoints: " + ec.message());
  return WriteFileAtomically((fs::path(options.run_dir) / "config.pbtxt").string(), ConfigToText(options.config));
}

// How the supervisor starts and restarts the role of `slot`.
// `servers` are every server's addresses, `my_host` the SameHostIdentity() of the slot's host.
RoleProcessOptions RoleOptions(const JobOptions& options, const RoleSlot& slot, uint64_t job_id,
                               const std::vector<ServerAddress>& servers, const std::string& my_host) {
  const auto& cluster = options.config.cluster();
  RoleProcessOptions role;
  role.name = slot.name();
  role.executable = options.executable;
  role.log_file = (fs::path(options.run_dir) / "logs" / (slot.name() + ".log")).string();
  role.heartbeat_timeout_ms = cluster.heartbeat_timeout_ms();
  role.max_restarts = cluster.max_restarts();
  role.restart_backoff_ms = cluster.restart_backoff_ms();
  role.reports_ready = true;
  RoleArguments arguments;
  arguments.kind = slot.kind;
  arguments.config = (fs::path(options.run_dir) / "config.pbtxt").string();
  arguments.run_dir = options.run_dir;
  arguments.index = slot.index;
  arguments.job_id = job_id;
  if (slot.kind == RoleSlot::Kind::kServer) {
    arguments.endpoint = servers[slot.index].tcp;
    arguments.ipc_endpoint = servers[slot.index].ipc;
  } else {
    arguments.servers = WorkerServerEndpoints(servers, my_host);
    arguments.gpu = slot.local_gpu;
  }
  arguments.resume = options.resume;
  role.args = arguments.ToArgs();
  if (cluster.same_host_shm()) role.environment.push_back(std::string(kShmJobVariable) + "=" + std::to_string(job_id));
  auto restart_environment = RestartEnvironment(options.config.fault());
  PSF_CHECK(restart_environment.ok());  // validated with the config
  role.restart_environment = std::move(*restart_environment);
  if (!options.curve_keys.empty()) {
    // Each role gets only its side's secret, in its environment (never on its command line).
    auto keys = DecodeCurveKeys(options.curve_keys);
    PSF_CHECK(keys.ok());
    const CurveKeys share = slot.kind == RoleSlot::Kind::kServer ? keys->ForServer() : keys->ForClient();
    role.environment.push_back(std::string(kCurveKeysVariable) + "=" + EncodeCurveKeys(share));
  }
  return role;
}

int Fail(const std::string& message) {
  std::cerr << "psformer train: error: " << message << "\n";
  return kExitFailure;
}

// The command that continues an interrupted run: the run directory holds the resolved config.
std::string ResumeCommand(const std::string& run_dir) {
  const std::string config = (fs::path(run_dir) / "config.pbtxt").string();
  return "psformer train --config " + config + " --run-dir " + run_dir + " --resume";
}

// What a stopped job says last: how to continue it, or, when no complete checkpoint exists (the
// stop came before the first step, or a server could not write it), that there is nothing to
// continue and how to start over. `launcher` prefixes the commands ("mpirun ... ").
std::string AfterStop(const std::string& run_dir, const std::string& launcher) {
  if (!NewestCompleteCheckpoint(run_dir).empty()) {
    return "psformer train: interrupted; continue with: " + launcher + ResumeCommand(run_dir) + "\n";
  }
  const std::string config = (fs::path(run_dir) / "config.pbtxt").string();
  return "psformer train: interrupted; no checkpoint was written (the job stopped before a server wrote one; see "
         "any warnings above and " +
         (fs::path(run_dir) / "logs").string() + "/): nothing to resume; start over with: " + launcher +
         "psformer train --config " + config + " --run-dir " + run_dir + " --overwrite\n";
}

uint64_t NewJobId() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
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
  const uint64_t job_id = NewJobId();
  auto keys = NewJobKeys(job.config);
  if (!keys.ok()) return Fail(keys.status().message());
  job.curve_keys = *keys;
  // Every role runs here: each worker reaches each server over ipc:// and shared memory.
  const std::string host_identity = SameHostIdentity();
  std::vector<ServerAddress> addresses;
  for (int s = 0; s < plan->servers(); ++s) {
    addresses.push_back({endpoints[s], ServerIpcEndpoint(job.config, job.run_dir, s), host_identity});
  }
  SweepOrphanSegments();
  LogJobSegments(job.config, job_id);
  std::vector<SupervisedRole> roles;
  for (const RoleSlot& slot : plan->slots()) {
    roles.push_back(
        {slot.kind, std::make_unique<RoleProcess>(RoleOptions(job, slot, job_id, addresses, host_identity))});
  }
  PSF_LOG(Info) << "single-node job: " << plan->servers() << " server(s), " << plan->workers() << " worker(s) on "
                << (*gpu_workers ? "GPUs" : "CPU") << "; run directory " << job.run_dir;
  SupervisorEvents events(job.run_dir, job.config.logging().tensorboard());
  const int status = SuperviseRoles(roles, job.run_dir, &events);
  roles.clear();  // every role process is gone
  RemoveJobSegments(job_id);
  if (status == kExitInterrupted || status == kExitHangup) std::cerr << AfterStop(job.run_dir, "");
  return status;
}

int RunClusterRank(const JobOptions& options) {
  MpiBootstrap mpi;
  SetLogTag("supervisor-" + std::to_string(mpi.rank()));
  // Every rank reports its host and the GPUs it sees there: "HOST GPUS".
  auto reports = mpi.AllGather(HostName() + " " + std::to_string(CudaDeviceCount()));
  if (!reports.ok()) mpi.Abort(kExitFailure);
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
    return kExitFailure;
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
  const uint64_t job_id = std::stoull(mpi.Broadcast(std::to_string(NewJobId())));
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
  if (mpi.AllReduceMax(endpoint_status.ok() ? kExitSuccess : kExitFailure) != kExitSuccess) return kExitFailure;
  auto all_endpoints = mpi.AllGather(my_endpoint);
  if (!all_endpoints.ok()) return kExitFailure;
  // Which ranks share a kernel and a network namespace (not just a host name: the cluster
  // simulator's hosts are namespaces of one kernel, and they talk TCP).
  const std::string host_identity = SameHostIdentity();
  auto identities = mpi.AllGather(host_identity);
  if (!identities.ok()) return kExitFailure;
  std::vector<std::string> server_endpoints;
  std::vector<ServerAddress> addresses;
  for (int s = 0; s < plan->servers(); ++s) {
    const int slot = plan->server(s).slot;
    server_endpoints.push_back((*all_endpoints)[slot]);
    addresses.push_back(
        {(*all_endpoints)[slot], ServerIpcEndpoint(local.config, local.run_dir, s), (*identities)[slot]});
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
  LogJobSegments(local.config, job_id);
  std::vector<SupervisedRole> roles;
  roles.push_back({me.kind, std::make_unique<RoleProcess>(RoleOptions(local, me, job_id, addresses, host_identity))});
  // On Ctrl-C mpirun signals every rank; the server ranks wait for the worker ranks' stop (with
  // a bound: a rank that was not signalled never arrives) before stopping their servers.
  SupervisorEvents events(local.run_dir, local.config.logging().tensorboard());
  const int status = SuperviseRoles(roles, local.run_dir, &events, [&] {
    const bool all = mpi.BarrierWithin(kWorkerStopTimeout + std::chrono::seconds(30), [&] {
      for (auto& role : roles) role.process->Poll();
    });
    if (!all) PSF_LOG(Warning) << "not every rank stopped its workers in time; stopping the servers anyway";
  });
  if (status != kExitSuccess && status != kExitInterrupted && status != kExitHangup) {
    // This rank's role cannot continue: the job cannot either. MPI_Abort ends every rank.
    std::cerr << "psformer train: error: rank " << mpi.rank() << " (" << me.name() << ") cannot continue; "
              << "aborting the job\n";
    mpi.Abort(status);
  }
  roles.clear();
  RemoveJobSegments(job_id);
  const int job_status = mpi.AllReduceMax(status);
  if ((job_status == kExitInterrupted || job_status == kExitHangup) && mpi.rank() == 0) {
    std::cerr << AfterStop(local.run_dir, "mpirun ... ");
  }
  return job_status;
}

}  // namespace psformer
