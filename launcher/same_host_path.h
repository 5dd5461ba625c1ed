// How workers reach the servers of their own host: over ipc:// in the run directory, with payloads
// in shared memory (docs/architecture.md, "Same-host path"), and how the job's segments in /dev/shm
// are found and removed. Workers of other hosts use the servers' TCP endpoints.
#ifndef PSFORMER_LAUNCHER_SAME_HOST_PATH_H_
#define PSFORMER_LAUNCHER_SAME_HOST_PATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/config_loader.h"

namespace psformer {

// Where a server listens and on which host it runs, as its workers decide how to reach it.
struct ServerAddress {
  std::string tcp;   // tcp://HOST:PORT, for workers of other hosts
  std::string ipc;   // ipc://RUN_DIR/ipc/pserver-S.sock for workers of its host; "" = none
  std::string host;  // SameHostIdentity() of its host
};

// The ipc:// endpoint of server `index` in `run_dir`, or "" when cluster.same_host_shm is off or
// the path would be too long for a Unix socket (then workers use TCP, and a log line says so).
std::string ServerIpcEndpoint(const JobConfig& config, const std::string& run_dir, int index);

// Where the aggregator of host group `group` listens for the group's workers, on their host:
// ipc://RUN_DIR/ipc/aggregator-G.sock. Fails when that path is too long for a Unix socket.
StatusOr<std::string> AggregatorEndpoint(const std::string& run_dir, int group);

// What a worker on host `my_host` connects to for each server: ipc:// where they share the host.
std::vector<std::string> WorkerServerEndpoints(const std::vector<ServerAddress>& servers, const std::string& my_host);

// Removes the Unix sockets `endpoints` (ipc://PATH; others are skipped) once the roles that
// listened on them are gone, with a server's HostLinkBoard file beside its socket, and the run's
// ipc/ folder they were in once it is empty: a finished or stopped run leaves no socket files. A
// path that is not a socket (or, for the board, a regular file) is left alone.
void RemoveSocketFiles(const std::vector<std::string>& endpoints);

// Removes this user's shared-memory segments whose creators are gone: what a job killed together
// with its supervisor left in /dev/shm.
void SweepOrphanSegments();

// Says where the job's shared memory lives, so that an operator (or a test) can look for it.
void LogJobSegments(const JobConfig& config, uint64_t job_id);

// Removes the job's segments on this host whose processes are gone; called once this
// supervisor's role processes are. Other ranks on the host may still run theirs: the last to end
// leaves none.
void RemoveJobSegments(uint64_t job_id);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_SAME_HOST_PATH_H_
