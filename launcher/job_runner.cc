#include "launcher/job_runner.h"

#include <signal.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string_view>

#include "common/clock_text.h"
#include "common/fault_plan.h"
#include "common/field_differences.h"
#include "common/host_groups.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/role_threads.h"
#include "common/transport/curve_keys.h"
#include "common/transport/host_identity.h"
#include "common/transport/van_factory.h"
#include "common/write_file.h"
#include "launcher/build_info.h"
#include "launcher/cluster_plan.h"
#include "launcher/exit_codes.h"
#include "launcher/memory_check.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/port_reservation.h"
#include "launcher/role_arguments.h"
#include "launcher/role_supervisor.h"
#include "launcher/same_host_path.h"
#include "launcher/shm_janitor.h"
#include "launcher/supervisor_events.h"
#include "worker/backend/backend_factory.h"
#include "worker/data/batch_source.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// How long the ranks of a failed job wait for rank 0 to undo what it left (JobOptions::on_failure).
constexpr std::chrono::seconds kUndoTimeout{30};

Status PrepareRunDir(const JobOptions& options) {
  PSF_RETURN_IF_ERROR(MakeDirectories((fs::path(options.run_dir) / "logs").string(), "run directory"));
  PSF_RETURN_IF_ERROR(MakeDirectories((fs::path(options.run_dir) / "checkpoints").string(), ""));
  return WriteFileAtomically((fs::path(options.run_dir) / "config.pbtxt").string(), ConfigToText(options.config));
}

// Every host group's aggregator socket fits its path (AggregatorEndpoint). Checked before the run
// directory is written: a refused job leaves nothing behind, and launch does not restart it.
Status AggregatorSocketsFit(const JobOptions& options) {
  const HostGroups groups = HostGroups::Of(options.config);
  for (int g = 0; g < groups.count(); ++g) PSF_RETURN_IF_ERROR(AggregatorEndpoint(options.run_dir, g).status());
  return Status::Ok();
}

int SlotWeight(const proto::JobConfig& config, const RoleSlot& slot) {
  return PayloadWeight(config, slot.kind == RoleSlot::Kind::kServer, slot.kind == RoleSlot::Kind::kAggregator,
                       slot.index);
}

// How the supervisor starts and restarts the role of `slot`.
// `servers` are every server's addresses, `my_host` the SameHostIdentity() of the slot's host.
RoleProcessOptions RoleOptions(const JobOptions& options, const RoleSlot& slot, uint64_t job_id,
                               const std::vector<ServerAddress>& servers, const std::string& my_host, int host_weight) {
  const auto& cluster = options.config.cluster();
  RoleProcessOptions role;
  role.name = slot.name();
  role.executable = options.executable;
  role.log_file = (fs::path(options.run_dir) / "logs" / (slot.name() + ".log")).string();
  role.heartbeat_timeout_ms = cluster.heartbeat_timeout_ms();
  role.max_restarts = cluster.max_restarts();
  role.restart_backoff_ms = cluster.restart_backoff_ms();
  role.reports_ready = true;
  role.holds_stop_signals_until_handled = true;
  RoleArguments arguments;
  arguments.kind = slot.kind;
  arguments.config = (fs::path(options.run_dir) / "config.pbtxt").string();
  arguments.run_dir = options.run_dir;
  arguments.index = slot.index;
  arguments.job_id = job_id;
  const HostGroups groups = HostGroups::Of(options.config);
  // Checked when the job was placed (PlaceOnThisNode, PlaceThisRank).
  const auto aggregator_endpoint = [&](int group) {
    auto endpoint = AggregatorEndpoint(options.run_dir, group);
    PSF_CHECK(endpoint.ok());
    return *endpoint;
  };
  if (slot.kind == RoleSlot::Kind::kServer) {
    arguments.endpoint = servers[slot.index].tcp;
    arguments.ipc_endpoint = servers[slot.index].ipc;
  } else if (slot.kind == RoleSlot::Kind::kAggregator) {
    arguments.endpoint = aggregator_endpoint(slot.index);
    arguments.servers = WorkerServerEndpoints(servers, my_host);
  } else {
    arguments.servers = WorkerServerEndpoints(servers, my_host);
    arguments.gpu = slot.local_gpu;
    if (groups.summing()) arguments.aggregator = aggregator_endpoint(groups.GroupOf(slot.index));
  }
  arguments.resume = options.resume;
  // With overlap the host's role processes pass over payloads at the same time: each gets its
  // share of the cores, unless the config names a count (common/role_threads.h). Without,
  // servers update while workers wait, and each takes what it took alone.
  if (cluster.threads_per_process() == 0 && cluster.overlap()) {
    arguments.threads = HostShareThreads(SlotWeight(options.config, slot), host_weight);
  }
  role.args = arguments.ToArgs();
  if (cluster.same_host_shm()) role.environment.push_back(std::string(kShmJobVariable) + "=" + std::to_string(job_id));
  auto restart_environment = RestartEnvironment(options.config.fault());
  PSF_CHECK(restart_environment.ok());  // validated with the config
  role.restart_environment = std::move(*restart_environment);
  if (!options.curve_keys.empty()) {
    // Each role gets only its side's secret, in its environment (never on its command line); an
    // aggregator is both sides (a server to its group's workers, a client of the servers).
    auto keys = DecodeCurveKeys(options.curve_keys);
    PSF_CHECK(keys.ok());
    const CurveKeys share = slot.kind == RoleSlot::Kind::kServer   ? keys->ForServer()
                            : slot.kind == RoleSlot::Kind::kWorker ? keys->ForClient()
                                                                   : *keys;
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
// continue and how to start over. `launcher` prefixes the commands ("mpirun ... "); `job_status`
// says how it stopped (kExitHangup: the terminal closed; otherwise a Ctrl-C or SIGTERM).
std::string AfterStop(const std::string& run_dir, const std::string& launcher, int job_status) {
  const std::string how = job_status == kExitHangup ? "hung up" : "interrupted";
  if (!NewestCompleteCheckpoint(run_dir).empty()) {
    return "psformer train: " + how + "; continue with: " + launcher + ResumeCommand(run_dir) + "\n";
  }
  const std::string config = (fs::path(run_dir) / "config.pbtxt").string();
  return "psformer train: " + how +
         "; no checkpoint was written (the job stopped before a server wrote one; see "
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
  constexpr size_t kLongestName = 64;
  std::string name;
  for (const char c : config.name().substr(0, kLongestName)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '+' || c == '_' || c == '-';
    name += plain ? c : '_';
  }
  if (name.empty()) name = "run";
  return "runs/" + name + "-" + ClockText(std::time(nullptr), "%Y%m%d-%H%M%S", TimeZone::kLocal);
}

namespace {

// Where a job's roles run and what they need to find each other: decided once, by a single node
// (PlaceOnThisNode) or by every MPI rank alike (PlaceThisRank); then SuperviseJob runs the same
// sequence either way.
struct Placement {
  JobOptions job;  // with the worker count resolved, the job's keys, run_dir
  uint64_t job_id = 0;
  std::vector<RoleSlot> mine;            // the roles this process supervises
  std::vector<ServerAddress> addresses;  // every server's
  std::string host_identity;             // SameHostIdentity() of this host
  std::string log_file;                  // this supervisor's
  std::string resume_prefix;             // what the advice to continue begins with ("mpirun ... ")
  bool advises = true;                   // this process says how to continue an interrupted job
  std::string summary;                   // the log line that says what runs here
};

// What a cluster rank adds to the sequence.
struct JobHooks {
  // Waits for every rank: on Ctrl-C once this rank's workers stopped (`stopping`; bounded, the
  // servers stop next), or once its roles all finished (unbounded; SupervisionHooks).
  std::function<void(std::vector<SupervisedRole>&, bool stopping)> wait_for_ranks;
  // With the supervision's status, before anything is cleaned up (a rank that cannot continue
  // aborts the whole job here); and the status the job ends with (every rank's worst).
  std::function<void(int status)> after_supervision;
  std::function<int(int status)> job_status;
  // A stop this rank began, passed on to the others; one another rank began (SupervisionHooks).
  std::function<void(int signal)> stop_began;
  std::function<int()> stop_asked;
  // Whether every worker of the job has finished (SupervisionHooks).
  std::function<bool(bool mine_finished)> every_worker_finished;
};

// The ipc:// endpoints the roles of this process listened on: its servers' and aggregators'.
std::vector<std::string> ListeningEndpoints(const Placement& placement) {
  std::vector<std::string> endpoints;
  for (const RoleSlot& slot : placement.mine) {
    if (slot.kind == RoleSlot::Kind::kServer && slot.index < static_cast<int>(placement.addresses.size())) {
      endpoints.push_back(placement.addresses[static_cast<size_t>(slot.index)].ipc);
    } else if (slot.kind == RoleSlot::Kind::kAggregator) {
      if (auto endpoint = AggregatorEndpoint(placement.job.run_dir, slot.index); endpoint.ok()) {
        endpoints.push_back(*endpoint);
      }
    }
  }
  return endpoints;
}

// The common sequence: log file, shared-memory sweep, the roles supervised, cleaned up, and the
// advice after an interrupted run.
int SuperviseJob(const Placement& placement, const JobHooks& hooks = {}) {
  const JobOptions& job = placement.job;
  // The supervisor's lines still reach stderr without the file; say why it is missing.
  if (Status s = SetLogFile(placement.log_file); !s.ok()) PSF_LOG(Warning) << "no supervisor log file: " << s.message();
  PSF_LOG(Info) << "psformer " << SourceCommit();  // which build ran the job
  PSF_LOG(Info) << placement.summary;
  SweepOrphanSegments();
  LogJobSegments(job.config, placement.job_id);
  // Removes the segments if this process is killed before it can (a kill -9 of it alone).
  std::optional<ShmJanitor> janitor;
  if (job.config.cluster().same_host_shm()) janitor.emplace(placement.job_id);
  std::vector<SupervisedRole> roles;
  int host_weight = 0;  // of the role processes on this host (common/role_threads.h)
  for (const RoleSlot& slot : placement.mine) host_weight += SlotWeight(job.config, slot);
  for (const RoleSlot& slot : placement.mine) {
    RoleProcessOptions options =
        RoleOptions(job, slot, placement.job_id, placement.addresses, placement.host_identity, host_weight);
    if (janitor) options.started = [&janitor](pid_t pid) { janitor->Watch(pid); };
    roles.push_back({slot.kind, std::make_unique<RoleProcess>(std::move(options))});
  }
  SupervisorEvents events(job.run_dir, job.config.logging().tensorboard());
  SupervisionHooks supervision;
  if (hooks.wait_for_ranks) {
    supervision.after_workers_stopped = [&] { hooks.wait_for_ranks(roles, true); };
    supervision.after_all_finished = [&] { hooks.wait_for_ranks(roles, false); };
  }
  supervision.stop_began = hooks.stop_began;
  supervision.stop_asked = hooks.stop_asked;
  supervision.every_worker_finished = hooks.every_worker_finished;
  const int status = SuperviseRoles(roles, job.run_dir, &events, supervision);
  if (hooks.after_supervision) hooks.after_supervision(status);
  roles.clear();  // every role process is gone
  RemoveJobSegments(placement.job_id);
  if (janitor) janitor->Done();
  // The socket files of a directory made again under that name are the new job's.
  if (!RunDirectoryWasLost()) RemoveSocketFiles(ListeningEndpoints(placement));
  const int job_status = hooks.job_status ? hooks.job_status(status) : status;
  if ((job_status == kExitInterrupted || job_status == kExitHangup) && placement.advises) {
    const std::string advice = AfterStop(job.run_dir, placement.resume_prefix, job_status);
    // With the console gone (a `| tee` the same Ctrl-C ended), the advice goes to the log.
    if (!(std::cerr << advice)) PSF_LOG(Warning) << advice.substr(0, advice.size() - 1);
  }
  return job_status;
}

RoleSlot AggregatorSlot(int group, const std::string& host) {
  RoleSlot slot;
  slot.kind = RoleSlot::Kind::kAggregator;
  slot.index = group;
  slot.host = host;
  return slot;
}

// Every role on this machine: each worker reaches each server over ipc:// and shared memory.
// Fails (naming why) before the run directory is touched.
StatusOr<Placement> PlaceOnThisNode(const JobOptions& options) {
  Placement p;
  p.job = options;
  auto& cluster = *p.job.config.mutable_cluster();
  const std::string host = HostName();
  const int gpus = GpusFor(cluster.backend());
  auto gpu_workers = ChooseGpuWorkers(cluster.backend(), {{host, gpus}});
  if (!gpu_workers.ok()) {
    return Status::InvalidArgument("cluster.backend = CUDA but this machine (" + host +
                                   ") has no GPU (CUDA device count 0; " + GpuUnavailableReason() +
                                   "); set cluster.backend to CPU or AUTO");
  }
  // Role processes read the worker count from the run's config.pbtxt, so 0 is resolved here.
  if (cluster.workers() == 0) cluster.set_workers(*gpu_workers ? gpus : 1);
  ClusterPlanOptions plan_options;
  plan_options.servers = cluster.servers();
  plan_options.workers = cluster.workers();
  plan_options.gpu_workers = *gpu_workers;
  plan_options.gpus_per_host = {{host, gpus}};
  PSF_ASSIGN_OR_RETURN(
      const ClusterPlan plan,
      ClusterPlan::Make(plan_options, std::vector<std::string>(cluster.servers() + cluster.workers(), host)));
  const HostGroups groups = HostGroups::Of(p.job.config);
  if (groups.summing() && groups.workers() != cluster.workers()) {
    return Status::InvalidArgument("cluster.host_groups " + groups.ToString() + " add up to " +
                                   std::to_string(groups.workers()) + " workers, but the job has " +
                                   std::to_string(cluster.workers()));
  }
  PSF_RETURN_IF_ERROR(AggregatorSocketsFit(p.job));
  // Ports before the run directory: a refused job leaves nothing behind.
  std::vector<std::string> endpoints;
  for (int s = 0; s < plan.servers(); ++s) {
    PSF_ASSIGN_OR_RETURN(const std::string endpoint, ServerEndpoint(cluster, s, 1));
    endpoints.push_back(endpoint);
  }
  if (p.job.before_first_write) PSF_RETURN_IF_ERROR(p.job.before_first_write());
  PSF_RETURN_IF_ERROR(PrepareRunDir(p.job));
  p.job_id = NewJobId();
  PSF_ASSIGN_OR_RETURN(p.job.curve_keys, NewJobKeys(p.job.config));
  p.host_identity = SameHostIdentity();
  for (int s = 0; s < plan.servers(); ++s) {
    p.addresses.push_back({endpoints[s], ServerIpcEndpoint(p.job.config, p.job.run_dir, s), p.host_identity});
  }
  p.mine = plan.slots();
  for (int g = 0; g < groups.count(); ++g) p.mine.push_back(AggregatorSlot(g, host));
  p.log_file = (fs::path(p.job.run_dir) / "logs" / "supervisor.log").string();
  // An emulated worker computes nothing: saying "on CPU" would pass its run for a trained one.
  const std::string workers_on = cluster.backend() == proto::ClusterConfig::EMULATED
                                     ? " emulated worker(s) (cluster.backend EMULATED: no arithmetic, synthetic "
                                       "gradients)"
                                     : std::string(" worker(s) on ") + (*gpu_workers ? "GPUs" : "CPU");
  p.summary = "single-node job: " + std::to_string(plan.servers()) + " server(s), " + std::to_string(plan.workers()) +
              workers_on + (groups.summing() ? ", summed in host groups " + groups.ToString() : std::string()) +
              "; run directory " + p.job.run_dir;
  return p;
}

// Whether every rank runs the build rank 0 does: another build may speak another protocol over
// MPI itself, or compute other bits. This is every rank's first collective after MpiBootstrap's
// own set-up, and must stay so, in this form, in every later psformer: a fixed-size AllGather of
// "psformer-build|COMMIT|HOST", so that two builds that differ in what follows still meet here,
// every rank learns every rank's build, and all fail alike with no further collective. (A
// psformer from before this check reports "HOST GPUS" in the same first AllGather: it is named
// as an older build.)
// `*rank0_host`: the host rank 0 runs on.
bool SameBuildOnEveryRank(MpiBootstrap& mpi, std::string* rank0_host) {
  static constexpr std::string_view kTag = "psformer-build|";
  auto hellos = mpi.AllGather(std::string(kTag) + SourceCommit() + "|" + HostName());
  if (!hellos.ok()) {
    std::cerr << "psformer train: error: rank " << mpi.rank() << ": " << hellos.status().message() << "\n";
    return false;
  }
  // "COMMIT on HOST", or what an older psformer said instead.
  const auto build = [](const std::string& hello) {
    if (hello.rfind(kTag, 0) != 0) return std::string("an older psformer (it said \"" + hello + "\")");
    const size_t bar = hello.rfind('|');
    return "psformer " + hello.substr(kTag.size(), bar - kTag.size()) + " on " + hello.substr(bar + 1);
  };
  const auto commit = [](const std::string& hello) { return hello.substr(0, hello.rfind('|')); };
  *rank0_host = (*hellos)[0].substr((*hellos)[0].rfind('|') + 1);
  bool same = true;
  for (int r = 1; r < mpi.size(); ++r) {
    if (commit((*hellos)[r]) == commit((*hellos)[0])) continue;
    same = false;
    // Said by the rank itself, or by rank 0 for an older psformer, which cannot.
    const bool older = (*hellos)[r].rfind(kTag, 0) != 0;
    if (mpi.rank() == r || (mpi.rank() == 0 && older)) {
      std::cerr << "psformer train: error: rank " << r << " runs " << build((*hellos)[r]) << ", rank 0 "
                << build((*hellos)[0]) << ": every rank must run the same build (build the same commit on every "
                << "host, or run one psformer from a file system every host shares)\n";
    }
  }
  return same;
}

// Whether every rank loaded the job rank 0 did. Each rank reads the config and the corpus on its
// own host (a copy on each, or one shared file system): a server with another learning rate or
// a worker with other batches or another corpus would train on without a word, and a rank that
// planned other roles would wait for ever in collectives the others never reach. So before any
// plan is made, rank 0 hands its config and a description of its corpus (the files' counts and
// recorded CRCs) to every rank, and a rank whose own differ says how (false on every rank).
// data.train_dir may name another place on another host; what it holds may not differ.
bool SameJobOnEveryRank(MpiBootstrap& mpi, const JobConfig& config, const std::string& rank0_host) {
  JobConfig mine = config;
  mine.mutable_data()->clear_train_dir();
  auto corpus = DescribePreparedCorpus(config);
  const std::string my_corpus = corpus.ok() ? *corpus : "unreadable (" + corpus.status().message() + ")";
  const std::string host = HostName();
  const std::string rank0_config = mpi.Broadcast(mine.SerializeAsString());
  const std::string rank0_corpus = mpi.Broadcast(my_corpus);
  std::vector<std::string> problems;
  JobConfig rank0;
  if (mpi.rank() != 0 && !rank0.ParseFromString(rank0_config)) {
    problems.push_back("rank 0's config did not arrive whole");
  } else if (mpi.rank() != 0) {
    constexpr size_t kShown = 6;
    const std::vector<FieldDifference> differences = FieldDifferences(rank0, mine);
    for (size_t i = 0; i < differences.size() && i < kShown; ++i) {
      const FieldDifference& d = differences[i];
      problems.push_back(d.path + " is " + d.b + " here and " + d.a + " on rank 0");
    }
    if (differences.size() > kShown) problems.push_back(std::to_string(differences.size() - kShown) + " more fields");
    if (my_corpus != rank0_corpus) {
      problems.push_back("its corpus (data.train_dir = \"" + config.data().train_dir() + "\") is not rank 0's: here " +
                         my_corpus + "; on rank 0 " + rank0_corpus);
    }
  }
  if (!problems.empty()) {
    std::string listed;
    for (const std::string& p : problems) listed += (listed.empty() ? "" : "; ") + p;
    std::cerr << "psformer train: error: rank " << mpi.rank() << " on " << host
              << " did not load the job that rank 0 on " << rank0_host << " did: " << listed
              << ". Every rank must run the same train command with the same config and corpus; copy "
                 "them to every host alike, or put them on a file system every host shares\n";
  }
  return mpi.AllReduceMax(problems.empty() ? kExitSuccess : kExitFailure) == kExitSuccess;
}

// The plan every rank computes alike from every rank's report, with the worker count resolved
// into `config`. Every rank fails the same way.
StatusOr<ClusterPlan> PlanCluster(MpiBootstrap& mpi, JobConfig* config) {
  // Every rank reports its host and the GPUs it sees there.
  auto reports = mpi.AllGather(HostName() + " " + std::to_string(GpusFor(config->cluster().backend())));
  if (!reports.ok()) mpi.Abort(kExitFailure);
  std::vector<std::string> hosts;
  std::vector<std::pair<std::string, int>> gpus_per_host;
  ReadHostReports(*reports, &hosts, &gpus_per_host);
  auto& cluster = *config->mutable_cluster();
  PSF_ASSIGN_OR_RETURN(const bool gpu_workers, ChooseGpuWorkers(cluster.backend(), gpus_per_host));
  if (!cluster.host_summing() || cluster.consistency() != proto::ClusterConfig::BSP) cluster.clear_host_groups();
  if (cluster.workers() == 0) {
    // Under mpirun the ranks say how many workers there are: every rank that is not a server.
    PSF_RETURN_IF_ERROR(ClusterPlan::CheckRanks(mpi.size(), cluster.servers(), 0));
    cluster.set_workers(mpi.size() - cluster.servers());
  }
  ClusterPlanOptions plan_options;
  plan_options.servers = cluster.servers();
  plan_options.workers = cluster.workers();
  plan_options.gpu_workers = gpu_workers;
  plan_options.gpus_per_host = gpus_per_host;
  PSF_ASSIGN_OR_RETURN(ClusterPlan plan, ClusterPlan::Make(plan_options, hosts));
  PSF_RETURN_IF_ERROR(ResolveHostGroups(plan, config));
  return plan;
}

// Whether `status` is ok on every rank (false: each failing rank has said why).
bool OkOnEveryRank(MpiBootstrap& mpi, const RoleSlot& me, const Status& status) {
  if (!status.ok()) {
    std::cerr << "psformer train: error: rank " << mpi.rank() << " (" << me.name() << " on " << me.host
              << "): " << status.message() << "\n";
  }
  return mpi.AllReduceMax(status.ok() ? kExitSuccess : kExitFailure) == kExitSuccess;
}

// This rank's server endpoint ("" for a worker) once every rank has its run directory; every
// rank learns whether all of them got that far. The sockets' paths and the servers' ports are
// checked on every rank before any rank writes the run directory: a refused job leaves nothing.
bool PrepareEveryRank(MpiBootstrap& mpi, const ClusterPlan& plan, const JobOptions& job, std::string* endpoint) {
  const RoleSlot& me = plan.slot(mpi.rank());
  Status status = AggregatorSocketsFit(job);
  if (status.ok() && me.kind == RoleSlot::Kind::kServer) {
    auto mine = ServerEndpoint(job.config.cluster(), me.index, plan.hosts());
    if (mine.ok()) *endpoint = *mine;
    status = mine.status();
  }
  if (!OkOnEveryRank(mpi, me, status)) return false;
  // Rank 0's (--overwrite's clearing) before any rank writes: the ranks of one host share it.
  const Status cleared = job.before_first_write ? job.before_first_write() : Status::Ok();
  if (!OkOnEveryRank(mpi, me, cleared)) return false;
  return OkOnEveryRank(mpi, me, PrepareRunDir(job));
}

// This rank's role, and every server's addresses, agreed over MPI. Returns the exit status in
// `failed` when the job cannot start (rank 0 has said why).
std::optional<Placement> PlaceThisRank(MpiBootstrap& mpi, const JobOptions& options, int* failed) {
  *failed = kExitFailure;
  Placement p;
  p.job = options;
  std::string rank0_host;
  if (!SameBuildOnEveryRank(mpi, &rank0_host) || !SameJobOnEveryRank(mpi, p.job.config, rank0_host)) {
    return std::nullopt;
  }
  auto plan = PlanCluster(mpi, &p.job.config);
  if (!plan.ok()) {
    if (mpi.rank() == 0) std::cerr << "psformer train: error: " << plan.status().message() << "\n";
    return std::nullopt;
  }
  p.job.run_dir = mpi.Broadcast(options.run_dir);
  p.job_id = std::stoull(mpi.Broadcast(std::to_string(NewJobId())));
  // Rank 0 makes the job's keys; MPI hands them to the other ranks (or rank 0's reason not to).
  auto keys = mpi.rank() == 0 ? NewJobKeys(p.job.config) : StatusOr<std::string>(std::string());
  p.job.curve_keys = mpi.Broadcast(keys.ok() ? *keys : "error: " + keys.status().message());
  if (p.job.curve_keys.rfind("error: ", 0) == 0) {
    if (mpi.rank() == 0) std::cerr << "psformer train: error: " << p.job.curve_keys.substr(7) << "\n";
    return std::nullopt;
  }
  std::string my_endpoint;
  if (!PrepareEveryRank(mpi, *plan, p.job, &my_endpoint)) return std::nullopt;
  auto all_endpoints = mpi.AllGather(my_endpoint);
  // Which ranks share a kernel and a network namespace (not just a host name: the cluster
  // simulator's hosts are namespaces of one kernel, and they talk TCP).
  p.host_identity = SameHostIdentity();
  auto identities = mpi.AllGather(p.host_identity);
  if (!all_endpoints.ok() || !identities.ok()) return std::nullopt;
  for (int s = 0; s < plan->servers(); ++s) {
    const int slot = plan->server(s).slot;
    p.addresses.push_back(
        {(*all_endpoints)[slot], ServerIpcEndpoint(p.job.config, p.job.run_dir, s), (*identities)[slot]});
  }
  const RoleSlot& me = plan->slot(mpi.rank());
  p.mine = {me};
  // A host group's aggregator runs beside the group's first worker.
  const HostGroups groups = HostGroups::Of(p.job.config);
  if (groups.summing() && me.kind == RoleSlot::Kind::kWorker) {
    const int g = groups.GroupOf(me.index);
    if (groups.first(g) == me.index) p.mine.push_back(AggregatorSlot(g, me.host));
  }
  p.log_file = (fs::path(p.job.run_dir) / "logs" / ("supervisor-" + std::to_string(mpi.rank()) + ".log")).string();
  p.resume_prefix = "mpirun ... ";
  p.advises = mpi.rank() == 0;
  std::string servers, reached;
  for (const ServerAddress& a : p.addresses) servers += (servers.empty() ? "" : ",") + a.tcp;
  for (const std::string& e : WorkerServerEndpoints(p.addresses, p.host_identity)) {
    reached += (reached.empty() ? "" : ",") + e;
  }
  p.summary =
      "rank " + std::to_string(mpi.rank()) + " runs " + me.name() + " on host " + me.host + "; servers at " + servers;
  if (me.kind == RoleSlot::Kind::kWorker && reached != servers) {
    p.summary += "; " + me.name() + " reaches the servers of its host over ipc: " + reached;
  }
  if (p.mine.size() > 1) p.summary += "; and " + p.mine[1].name() + ", which sums the host group's gradients";
  *failed = kExitSuccess;
  return p;
}

// This rank's part of the job, its exit status agreed by every rank.
int SuperviseThisRank(MpiBootstrap& mpi, const JobOptions& options) {
  int failed = kExitFailure;
  std::optional<Placement> placement = PlaceThisRank(mpi, options, &failed);
  if (!placement) return failed;
  JobHooks hooks;
  // On Ctrl-C mpirun signals every rank; the server ranks wait for the worker ranks' stop (with
  // a bound: a rank that was not signalled never arrives) before stopping their servers.
  hooks.wait_for_ranks = [&](std::vector<SupervisedRole>& roles, bool stopping) {
    const auto poll = [&] {
      for (auto& role : roles) role.process->Poll();
    };
    // This rank's workers have finished or stopped: no rank waits on them any more.
    mpi.NoteWorkersFinished();
    if (!stopping) {
      mpi.BarrierWithin(std::chrono::milliseconds::max(), poll);
    } else if (!mpi.BarrierWithin(kWorkerStopTimeout + std::chrono::seconds(30), poll)) {
      PSF_LOG(Warning) << "not every rank stopped its workers in time; stopping the servers anyway";
    }
  };
  hooks.after_supervision = [&](int status) {
    if (status == kExitSuccess || status == kExitInterrupted || status == kExitHangup) return;
    // This rank's role cannot continue: the job cannot either. MPI_Abort ends every rank.
    std::cerr << "psformer train: error: rank " << mpi.rank() << " (" << placement->mine[0].name()
              << ") cannot continue; aborting the job\n";
    mpi.Abort(status);
  };
  // A stop signal that reached this rank alone (a kill of its pid, a node's own shutdown) stops
  // the whole job in order, as mpirun's Ctrl-C to every rank does.
  mpi.ListenForStop();
  hooks.stop_began = [&](int signal) { mpi.AnnounceStop(signal); };
  hooks.stop_asked = [&] {
    const std::optional<MpiBootstrap::StopNotice> notice = mpi.StopAsked();
    if (!notice) return 0;
    const bool hangup = notice->signal == SIGHUP;
    PSF_LOG(Warning) << "rank " << notice->rank << (hangup ? " hung up" : " was interrupted")
                     << " and stops the job: this rank stops in order too";
    return hangup ? SIGHUP : SIGINT;
  };
  // A server rank has no workers of its own: it learns here when every worker rank's have
  // finished, and stops a server that outlives them (it never heard the job end).
  hooks.every_worker_finished = [&](bool mine_finished) {
    if (mine_finished) mpi.NoteWorkersFinished();
    return mpi.WorkersFinishedEverywhere();
  };
  hooks.job_status = [&](int status) {
    mpi.EndStopNotices();
    return mpi.AllReduceMax(status);
  };
  return SuperviseJob(*placement, hooks);
}

}  // namespace

int RunSingleNode(const JobOptions& options) {
  auto placement = PlaceOnThisNode(options);
  if (!placement.ok()) return Fail(placement.status().message());
  return SuperviseJob(*placement);
}

int RunClusterRank(const JobOptions& options) {
  MpiBootstrap mpi;
  SetLogTag("supervisor-" + std::to_string(mpi.rank()));
  const int status = SuperviseThisRank(mpi, options);
  if (status == kExitSuccess) return status;
  // Once one rank exits non-zero, mpirun kills every rank that has not finished MPI_Finalize
  // (rank 0 of a refused job was killed there, leaving its .lock): rank 0 undoes what the job
  // leaves in its run directory before any rank finalizes.
  if (mpi.rank() == 0 && options.on_failure) options.on_failure();
  if (!mpi.BarrierWithin(kUndoTimeout, nullptr)) PSF_LOG(Warning) << "not every rank ended the failed job in time";
  return status;
}

}  // namespace psformer
