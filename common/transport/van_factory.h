// The Vans of role processes, made from the job config: ZeroMQ, authenticated with the job's
// CURVE keys (curve_keys.h) when cluster.authenticate is on and the keys are in the environment,
// and wrapped in a FaultyVan (faulty_van.h) when the fault section asks for transport faults.
//
// Same-host shared memory (shm_van.h): with cluster.same_host_shm on and the job id in
// PSFORMER_SHM_JOB (the launcher sets it), the ZeroMQ Van is wrapped in a ShmVan, under any
// FaultyVan (so an injected duplicate is a second copy, never a second claim of one slot).
//
// Without keys in the environment (tests, embedded use) the Van is plain ZeroMQ and a warning
// says so; with cluster.authenticate = false keys are ignored and an info line says so. Malformed
// keys or fault fractions are errors that name the variable or field.
#ifndef PSFORMER_COMMON_TRANSPORT_VAN_FACTORY_H_
#define PSFORMER_COMMON_TRANSPORT_VAN_FACTORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/fault_plan.h"
#include "common/proto/config.pb.h"
#include "common/transport/curve_keys.h"
#include "common/transport/faulty_van.h"
#include "common/transport/van.h"

namespace psformer {

// The environment variable that carries the job id (decimal) to role processes whose payloads
// may travel through shared memory.
inline constexpr char kShmJobVariable[] = "PSFORMER_SHM_JOB";

// A server's Van (Bind it): CURVE server admitting only the job's client key.
// fault_stream: FaultStream(FaultRole::kServer, shard). ipc_endpoint: "ipc://PATH" where same-host
// clients reach it besides the endpoint it binds ("" = none; needs PSFORMER_SHM_JOB).
// shm_faults: where the process's FaultPlan arms KILL_IN_SHM events (FaultPlan::shm_faults).
// shard_begin: where the server's shard begins (with cluster.sums_first, an answer's place in
// forward order is its offset from there).
StatusOr<std::unique_ptr<Van>> MakeServerVan(const proto::JobConfig& config, uint64_t fault_stream,
                                             uint64_t shard_begin, const std::string& ipc_endpoint = "",
                                             std::shared_ptr<ShmFaultSwitch> shm_faults = nullptr);

// A client's Van (Connect it to the servers): CURVE client trusting only the job's server key.
// fault_stream: FaultStream(FaultRole::kWorker, worker) or FaultStream(FaultRole::kControl, id).
// io_threads: ZeroMQ I/O threads of its context. shm_faults: as for MakeServerVan.
// stop_waiting: true once the process is asked to stop; a Send waiting for room to queue (to a
// server that refused this client's CURVE handshake) then fails at once (ZmqVanOptions).
StatusOr<std::unique_ptr<Van>> MakeClientVan(const proto::JobConfig& config, uint64_t fault_stream, int io_threads = 1,
                                             std::shared_ptr<ShmFaultSwitch> shm_faults = nullptr,
                                             std::function<bool()> stop_waiting = nullptr);

// A host group's aggregator's Van (pserver/aggregator/host_aggregator.h): Bind it for the group's
// workers (a CURVE server to them) and Connect it to the servers (a CURVE client of theirs), so
// it needs both secret keys. fault_stream: FaultStream(FaultRole::kAggregator, group).
StatusOr<std::unique_ptr<Van>> MakeAggregatorVan(const proto::JobConfig& config, uint64_t fault_stream,
                                                 std::shared_ptr<ShmFaultSwitch> shm_faults = nullptr);

// Where a server listens for `endpoint` (what clients connect to). With a wildcard
// cluster.bind_host (0.0.0.0, * or empty) the launcher names the endpoint by this host's name,
// which ZeroMQ cannot bind (it takes interfaces and addresses only): then the server listens on
// every interface at that port, as bind_host asks. Any other endpoint is bound as it is.
std::string ServerBindEndpoint(const proto::JobConfig& config, const std::string& endpoint);

// The same with the keys given instead of read from the environment (nullptr = no CURVE), for
// tests and for processes that hold the keys themselves.
StatusOr<std::unique_ptr<Van>> MakeServerVanWithKeys(const proto::JobConfig& config, uint64_t fault_stream,
                                                     const CurveKeys* keys);
StatusOr<std::unique_ptr<Van>> MakeClientVanWithKeys(const proto::JobConfig& config, uint64_t fault_stream,
                                                     const CurveKeys* keys, int io_threads = 1);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_VAN_FACTORY_H_
