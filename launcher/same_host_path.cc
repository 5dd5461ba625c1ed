#include "launcher/same_host_path.h"

#include <filesystem>
#include <optional>
#include <string_view>

#include "common/logging.h"
#include "common/transport/host_identity.h"
#include "common/transport/host_link_board.h"
#include "common/transport/shm_segment.h"

namespace psformer {

namespace fs = std::filesystem;

// A socket path longer than this does not fit a sockaddr_un (108 bytes with its terminator).
constexpr size_t kMaxIpcPathBytes = 100;

std::string ServerIpcEndpoint(const JobConfig& config, const std::string& run_dir, int index) {
  if (!config.cluster().same_host_shm()) return "";
  std::error_code ec;
  const fs::path path = fs::absolute(fs::path(run_dir) / "ipc" / ("pserver-" + std::to_string(index) + ".sock"), ec);
  if (ec || path.string().size() > kMaxIpcPathBytes) {
    PSF_LOG(Warning) << "the run directory's path is too long for a Unix socket (" << path.string()
                     << "); workers reach server " << index << " over TCP, without shared memory";
    return "";
  }
  return "ipc://" + path.string();
}

StatusOr<std::string> AggregatorEndpoint(const std::string& run_dir, int group) {
  std::error_code ec;
  const fs::path path =
      fs::absolute(fs::path(run_dir) / "ipc" / ("aggregator-" + std::to_string(group) + ".sock"), ec);
  if (ec || path.string().size() > kMaxIpcPathBytes) {
    return Status::InvalidArgument("the run directory's path is too long for the Unix socket of host group " +
                                   std::to_string(group) + "'s aggregator (" + path.string() +
                                   "); choose a shorter --run-dir, or set cluster.host_summing = false");
  }
  return "ipc://" + path.string();
}

std::vector<std::string> WorkerServerEndpoints(const std::vector<ServerAddress>& servers, const std::string& my_host) {
  std::vector<std::string> endpoints;
  for (const ServerAddress& s : servers)
    endpoints.push_back(!s.ipc.empty() && SameHost(s.host, my_host) ? s.ipc : s.tcp);
  return endpoints;
}

void RemoveSocketFiles(const std::vector<std::string>& endpoints) {
  constexpr std::string_view kIpc = "ipc://";
  for (const std::string& endpoint : endpoints) {
    if (endpoint.compare(0, kIpc.size(), kIpc) != 0) continue;
    const fs::path path = endpoint.substr(kIpc.size());
    std::error_code ec;
    // A server's HostLinkBoard (cluster.sums_first) beside its socket, where there is one.
    if (auto board = HostLinkBoard::PathFor(endpoint);
        board.ok() && fs::is_regular_file(fs::symlink_status(*board, ec))) {
      fs::remove(*board, ec);
    }
    if (!fs::is_socket(fs::symlink_status(path, ec))) continue;
    fs::remove(path, ec);
    if (ec) {
      PSF_LOG(Warning) << "cannot remove the socket " << path.string() << ": " << ec.message();
      continue;
    }
    // Removes the folder only when nothing else is in it (another host's sockets, on a shared file system).
    if (fs::is_empty(path.parent_path(), ec) && !ec) fs::remove(path.parent_path(), ec);
  }
}

void SweepOrphanSegments() {
  if (const int n = RemoveOrphanShmSegments(); n > 0) {
    PSF_LOG(Info) << "removed " << n << " shared-memory segment(s) left in /dev/shm by processes that no longer exist";
  }
}

void LogJobSegments(const JobConfig& config, uint64_t job_id) {
  if (!config.cluster().same_host_shm()) return;
  PSF_LOG(Info) << "same-host payloads travel through shared memory: /dev/shm" << ShmJobPrefix(job_id)
                << "* (removed when the job ends; cluster.same_host_shm = false turns it off)";
}

void RemoveJobSegments(uint64_t job_id) {
  // Only those of processes that are gone: another rank's supervisor on this host (several
  // ranks share a host under mpirun) may still run roles whose segments are being read.
  const int n = RemoveOrphanShmSegments(job_id);
  if (n > 0) PSF_LOG(Info) << "removed " << n << " shared-memory segment(s) the job's processes left";
}

}  // namespace psformer
