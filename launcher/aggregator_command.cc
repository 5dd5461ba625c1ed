// `psformer aggregator`: the summing point of one host group (pserver/aggregator/host_aggregator.h),
// started by the supervisor of that group's host beside its workers. Serves until every worker of
// the group has said goodbye, SIGTERM or SIGINT, or until the servers leave a request unanswered
// past its bounds (exit 1, restarted; kExitDoNotRestart for a shared-memory segment given up on).
#include <sys/stat.h>

#include <filesystem>

#include "common/config_loader.h"
#include "common/heartbeat.h"
#include "common/host_groups.h"
#include "common/logging.h"
#include "common/param_layout.h"
#include "common/supervisor_report.h"
#include "common/trace.h"
#include "common/transport/van_factory.h"
#include "launcher/role_arguments.h"
#include "launcher/serve_until_signalled.h"
#include "pserver/aggregator/host_aggregator.h"

namespace psformer {
int RunAggregatorCommand(const Args& args) {
  RoleCommandLine line = ParseRoleCommandLine(RoleSlot::Kind::kAggregator, args);
  if (line.exit_status) return *line.exit_status;
  const RoleArguments& role = line.arguments;
  const JobConfig& config = line.config;
  SetLogTag("aggregator-" + std::to_string(role.index));
  SetLogLevel(static_cast<LogLevel>(config.logging().level()));
  const ParamLayout layout(config.model(), line.vocab);
  HostAggregatorOptions o;
  o.config = config;
  o.group = role.index;
  o.parameter_count = layout.total_size();
  o.layer_starts = layout.LayerStarts();
  o.job_id = role.job_id;
  o.servers = role.servers;
  o.endpoint = role.endpoint;
  o.incarnation = role.incarnation;
  o.shm_faults = std::make_shared<ShmFaultSwitch>();
  HeartbeatSender heartbeat(config.cluster().heartbeat_interval_ms());
  if (role.endpoint.rfind("ipc://", 0) == 0) {
    // 0700: the directory is what keeps other users off the socket; an earlier incarnation's
    // socket is replaced.
    const std::filesystem::path socket = role.endpoint.substr(6);
    std::error_code ec;
    std::filesystem::create_directories(socket.parent_path(), ec);
    if (ec || chmod(socket.parent_path().c_str(), 0700) != 0) {
      return ReportError("aggregator", "cannot make the ipc directory " + socket.parent_path().string() +
                                           " (mode 0700)" + (ec ? ": " + ec.message() : std::string()));
    }
    std::filesystem::remove(socket, ec);
  }
  auto van = MakeAggregatorVan(config, FaultStream(FaultRole::kAggregator, static_cast<uint32_t>(role.index)),
                               o.shm_faults);
  if (!van.ok()) return ReportError("aggregator", van.status());
  auto aggregator = HostAggregator::Create(std::move(o), std::move(*van));
  if (!aggregator.ok()) return ReportError("aggregator", aggregator.status());
  ReportToSupervisor(kReportReady);
  const ServeOutcome served = ServeUntilSignalled([&] { return (*aggregator)->Run(); },
                                                  [&] { (*aggregator)->Stop(); });
  if (Status traced = Trace::Finish(); !traced.ok()) PSF_LOG(Warning) << "trace not written: " << traced.message();
  if (!served.status.ok()) {
    // The segment was mapped afresh once already (ShmVan), so a restarted aggregator would map
    // what this one refused: the job ends once, with the message naming the segment. A request
    // that went unanswered is restarted, as a worker whose wait ran out.
    if (!(*aggregator)->gave_up_on_segment()) return ReportError("aggregator", served.status);
    ReportToSupervisor(kReportFatal, served.status.message());
    return ReportError("aggregator", served.status, kExitDoNotRestart);
  }
  return 0;
}

}  // namespace psformer
