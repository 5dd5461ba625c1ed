// `psformer worker`: one worker role process, normally started by a supervisor
// (launcher/job_runner.h) with the resolved config of the run directory.
#include <signal.h>

#include "common/config_loader.h"
#include "common/heartbeat.h"
#include "common/host_groups.h"
#include "common/logging.h"
#include "common/role_signals.h"
#include "common/supervisor_report.h"
#include "common/trace.h"
#include "launcher/role_arguments.h"
#include "worker/worker_loop.h"

namespace psformer {

int RunWorkerCommand(const Args& args) {
  RoleCommandLine line = ParseRoleCommandLine(RoleSlot::Kind::kWorker, args);
  if (line.exit_status) return *line.exit_status;
  const RoleArguments& role = line.arguments;
  const JobConfig& config = line.config;
  WorkerOptions worker;
  worker.config = config;
  worker.index = role.index;
  worker.servers = role.servers;
  worker.aggregator = role.aggregator;
  if (const HostGroups groups = HostGroups::Of(config); groups.summing() != !worker.aggregator.empty()) {
    return ReportError("worker",
                       worker.aggregator.empty()
                           ? "this job sums on hosts (cluster.host_groups " + groups.ToString() +
                                 "): --aggregator must name the worker's host group's aggregator"
                           : "--aggregator is given, but this job does not sum on hosts (cluster.host_groups, "
                             "cluster.host_summing, BSP)",
                       kExitUsage);
  }
  worker.job_id = role.job_id;
  worker.incarnation = role.incarnation;
  worker.run_dir = role.run_dir;
  worker.gpu = role.gpu;
  if (static_cast<int>(worker.servers.size()) != config.cluster().servers()) {
    return ReportError("worker",
                       "--servers names " + std::to_string(worker.servers.size()) +
                           " endpoint(s) but cluster.servers is " + std::to_string(config.cluster().servers()),
                       kExitUsage);
  }
  SetLogTag("worker-" + std::to_string(worker.index));
  SetLogLevel(static_cast<LogLevel>(config.logging().level()));
  HeartbeatSender heartbeat(config.cluster().heartbeat_interval_ms());
  // The supervisor's stop signal (the job is being interrupted): finish the step in hand, then
  // exit 0. Another sender's stop signal is the supervisor's to act on (common/role_signals.h).
  InstallRoleStopSignals([](int) { RequestWorkerStop(); }, {SIGTERM, SIGINT, SIGHUP});
  const Status status = RunWorker(worker);
  if (Status traced = Trace::Finish(); !traced.ok()) PSF_LOG(Warning) << "trace not written: " << traced.message();
  // A fatal report (a diverged loss) asks the supervisor to end the job, not to restart.
  if (!status.ok()) return ReportError("worker", status, FatalReportSent() ? kExitDoNotRestart : kExitFailure);
  return 0;
}

}  // namespace psformer
