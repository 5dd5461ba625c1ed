// `psformer pserver`: one parameter-server shard (pserver/server/parameter_server.h), normally started
// by a supervisor (launcher/job_runner.h) with the resolved config of the run directory. Serves
// until a SHUTDOWN message, SIGTERM or SIGINT.
#include <algorithm>
#include <filesystem>

#include "common/checkpoint/checkpoint_store.h"
#include "common/config_loader.h"
#include "common/heartbeat.h"
#include "common/logging.h"
#include "common/param_init.h"
#include "common/param_layout.h"
#include "common/supervisor_report.h"
#include "common/trace.h"
#include "common/transport/counting_van.h"
#include "common/transport/van_factory.h"
#include "launcher/role_arguments.h"
#include "launcher/serve_until_signalled.h"
#include "launcher/server_scalars.h"
#include "pserver/server/parameter_server.h"
#include "pserver/server/shard_checkpointer.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace {

// Checkpoint failures as this server meets them: each is reported to the supervisor; after
// checkpoint.max_failures_in_a_row in a row the server gives up: it stops before it applies
// another step. Used on the serving thread only.
struct CheckpointFailures {
  int limit = 1;
  int in_a_row = 0;
  std::string last_error;
  bool give_up = false;
  ParameterServer* server = nullptr;  // set once created

  void Record(int shard, int64_t step, const Status& result) {
    if (result.ok()) {
      in_a_row = 0;
      return;
    }
    ++in_a_row;
    last_error = result.message();
    ReportToSupervisor(kReportCheckpointFailed, "shard " + std::to_string(shard) +
                                                    " could not write its checkpoint of step " + std::to_string(step) +
                                                    " (" + std::to_string(in_a_row) + " in a row; " +
                                                    std::to_string(limit) + " stop the job): " + last_error);
    if (in_a_row >= limit && server != nullptr) {
      give_up = true;
      server->Stop();
    }
  }
};

// The newest checkpoint of the run that is complete and intact, as a path, or "none".
std::string NewestGoodCheckpoint(const std::string& run_dir, const CheckpointIdentity& id) {
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    if (VerifyCheckpoint(run_dir, step, id).ok()) return CheckpointDir(run_dir, step);
  }
  return "none";
}

// The server's TensorBoard scalars (launcher/server_scalars.h), or null when logging.tensorboard
// is off or they cannot be written: they are for watching, and the shard serves without them.
std::unique_ptr<ServerScalars> OpenServerScalars(const JobConfig& config, const std::string& run_dir, int index,
                                                 const ParameterServerStats* stats,
                                                 std::shared_ptr<const VanTraffic> traffic) {
  if (!config.logging().tensorboard()) return nullptr;
  ServerScalarsOptions options;
  options.dir = (std::filesystem::path(run_dir) / "tensorboard" / ("server-" + std::to_string(index))).string();
  options.name = "pserver-" + std::to_string(index);
  options.every_steps = std::max(1, config.logging().every_steps());
  auto scalars = ServerScalars::Open(std::move(options), stats, std::move(traffic));
  if (!scalars.ok()) {
    PSF_LOG(Warning) << "no TensorBoard scalars for this server: " << scalars.status().message();
    return nullptr;
  }
  return std::move(*scalars);
}

// Samples `scalars` (if any); after a failed write, warns once and drops them.
void SampleServerScalars(std::unique_ptr<ServerScalars>& scalars, bool finish) {
  if (!scalars) return;
  const Status s = finish ? scalars->Finish() : scalars->Sample();
  if (s.ok()) return;
  PSF_LOG(Warning) << "TensorBoard scalars of this server stop here: " << s.message();
  scalars.reset();
}

// The shard's options from its command line (the fault and checkpoint hooks are the caller's).
ParameterServerOptions ServerOptions(const RoleArguments& role, const JobConfig& config, int vocab) {
  auto layout = std::make_shared<ParamLayout>(config.model(), vocab);
  ParameterServerOptions o;
  o.config = config;
  o.shard = role.index;
  o.parameter_count = layout->total_size();
  o.layer_starts = layout->LayerStarts();  // the pieces of overlap (workers cut the same)
  o.config_digest = ModelConfigDigest(config, vocab);
  o.job_id = role.job_id;
  o.endpoint = ServerBindEndpoint(config, role.endpoint);
  o.run_dir = role.run_dir;
  o.resume = role.resume;
  o.threads = role.threads;
  o.incarnation = role.incarnation;
  const uint64_t seed = config.training().seed();
  o.init = [layout, seed](uint64_t begin, uint64_t end, float* out) { InitParamRange(*layout, seed, begin, end, out); };
  return o;
}

}  // namespace

int RunPserverCommand(const Args& args) {
  RoleCommandLine line = ParseRoleCommandLine(RoleSlot::Kind::kServer, args);
  if (line.exit_status) return *line.exit_status;
  const RoleArguments& role = line.arguments;
  const JobConfig& config = line.config;
  const int index = role.index;
  if (!role.ipc_endpoint.empty() && role.ipc_endpoint.rfind("ipc://", 0) != 0) {
    return ReportError("pserver", "--ipc-endpoint " + role.ipc_endpoint + " is not ipc://PATH", kExitUsage);
  }
  SetLogTag("pserver-" + std::to_string(index));
  SetLogLevel(static_cast<LogLevel>(config.logging().level()));

  ParameterServerOptions o = ServerOptions(role, config, line.vocab);
  // Alive from here on: initialising a base-sized shard can take longer than the heartbeat
  // timeout on a busy machine, and the supervisor must not take that for a hang.
  HeartbeatSender heartbeat(config.cluster().heartbeat_interval_ms());
  CheckpointFailures checkpoint_failures;
  checkpoint_failures.limit = config.checkpoint().max_failures_in_a_row();
  o.on_checkpoint = [&checkpoint_failures, index](int64_t step, const Status& result) {
    checkpoint_failures.Record(index, step, result);
  };
  o.shm_faults = std::make_shared<ShmFaultSwitch>();  // the fault plan arms, the ShmVan strikes
  auto van = MakeServerVan(config, FaultStream(FaultRole::kServer, static_cast<uint32_t>(index)),
                           ShardOf(o.parameter_count, config.cluster().servers(), index).begin, role.ipc_endpoint,
                           o.shm_faults);
  if (!van.ok()) return ReportError("pserver", van.status());
  // Bytes in and out are counted at the Van, so that the server's own code stays out of it.
  auto traffic = std::make_shared<VanTraffic>();
  auto server = ParameterServer::Create(std::move(o), std::make_unique<CountingVan>(std::move(*van), traffic));
  if (!server.ok()) return ReportError("pserver", server.status());
  checkpoint_failures.server = server->get();
  std::unique_ptr<ServerScalars> scalars = OpenServerScalars(config, role.run_dir, index, &(*server)->stats(), traffic);
  ReportToSupervisor(kReportReady);
  const ServeOutcome served = ServeUntilSignalled([&] { return (*server)->Run(); }, [&] { (*server)->Stop(); },
                                                  [&] { SampleServerScalars(scalars, /*finish=*/false); });
  SampleServerScalars(scalars, /*finish=*/true);
  if (Status traced = Trace::Finish(); !traced.ok()) PSF_LOG(Warning) << "trace not written: " << traced.message();
  if (!served.status.ok()) return ReportError("pserver", served.status);
  if (checkpoint_failures.give_up) {
    // Training on without checkpoints would risk every step since the last one; a restart
    // would meet the same disk. The job stops here.
    const std::string why =
        std::to_string(checkpoint_failures.limit) +
        " checkpoint(s) in a row could not be written; last good checkpoint: " +
        NewestGoodCheckpoint(role.run_dir, JobCheckpointIdentity(config, line.vocab)) +
        "; stopping the job (checkpoint.max_failures_in_a_row; last error: " + checkpoint_failures.last_error + ")";
    ReportToSupervisor(kReportFatal, why);
    return ReportError("pserver", why, kExitDoNotRestart);
  }
  if (served.signalled) {
    // Interrupted (Ctrl-C on the job): leave a checkpoint to --resume from.
    const Status saved = (*server)->CheckpointLastStep();
    if (!saved.ok()) return ReportError("pserver", saved.WithContext("checkpoint on interrupt"));
  }
  return 0;
}

}  // namespace psformer
