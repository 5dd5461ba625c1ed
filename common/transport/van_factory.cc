#include "common/transport/van_factory.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "common/host_groups.h"
#include "common/logging.h"
#include "common/role_threads.h"
#include "common/transport/host_link_board.h"
#include "common/transport/shm_van.h"
#include "common/transport/zmq_van.h"

namespace psformer {
namespace {

// kBoth: an aggregator, a server to its host group's workers and a client of the servers.
enum class Side { kServer, kClient, kBoth };

constexpr int kRefusedSendTimeoutMs = 30000;

StatusOr<std::unique_ptr<Van>> MakeVan(const proto::JobConfig& config, uint64_t fault_stream, const CurveKeys* keys,
                                       int io_threads, Side side, const ShmVanOptions* shm = nullptr,
                                       std::function<bool(const SendRank&)> yield_answer = nullptr,
                                       std::function<bool()> stop_waiting = nullptr) {
  const FaultyVanOptions faults = FaultyVanOptions::FromConfig(config.fault(), fault_stream);
  PSF_RETURN_IF_ERROR(faults.Validate());
  ZmqVanOptions zo;
  // Each of a peer's connections (cluster.streams) works on an I/O thread of its own, on both
  // sides: a server's connections from every worker share its threads.
  zo.streams = config.cluster().streams();
  zo.io_threads = std::max(io_threads, zo.streams);
  // A server that refuses this client's handshake (other CURVE keys, or none where it wants
  // them) leaves nothing to queue to: a Send fails after this long instead of hanging, and at
  // once when stop_waiting says the process was asked to stop (the signal that asked may have
  // reached any of its threads, not the one waiting).
  if (side != Side::kServer) zo.send_timeout_ms = kRefusedSendTimeoutMs;
  zo.stop_waiting = std::move(stop_waiting);
  // Servers and aggregators poll their Vans in a loop, so they may hold back what they send
  // over tcp:// (an aggregator's sums to other hosts' servers, a server's answers to peers that
  // came over tcp://) and send it by need; a worker's client thread waits on its own commands
  // between polls.
  if (side != Side::kClient) {
    zo.send_window = config.cluster().send_window();
    zo.send_buffer_bytes = config.cluster().send_buffer_kib() * 1024;
    zo.slice_bytes = config.cluster().slice_kib() * 1024;
  }
  zo.hold_answers = side == Side::kServer;
  zo.yield_answer = std::move(yield_answer);
  if (!config.cluster().authenticate()) {
    PSF_LOG(Info) << "transport: cluster.authenticate = false; any process that reaches the endpoints may talk "
                     "to the servers";
  } else if (keys == nullptr) {
    PSF_LOG(Warning) << "transport: no CURVE keys in " << kCurveKeysVariable
                     << " (not started by psformer train?); the transport is unauthenticated and unencrypted";
  } else if (side != Side::kClient && keys->server_secret.empty()) {
    return Status::InvalidArgument(std::string(kCurveKeysVariable) + " has no server secret key; a server needs it");
  } else if (side != Side::kServer && keys->client_secret.empty()) {
    return Status::InvalidArgument(std::string(kCurveKeysVariable) + " has no client secret key; a client needs it");
  } else if (config.cluster().encryption() == proto::ClusterConfig::AES_256_GCM) {
    if (keys->payload_key.empty()) {
      return Status::InvalidArgument(std::string(kCurveKeysVariable) +
                                     " has no payload key; cluster.encryption = AES_256_GCM needs it");
    }
    PSF_ASSIGN_OR_RETURN(zo.sealer, PayloadSealer::Create(CurveKeyBytes(keys->payload_key)));
    zo.seal_threads = side == Side::kClient ? ClientPayloadThreads(config) : ServerPayloadThreads(config);
    PSF_LOG(Info) << "transport: every frame sealed with AES-256-GCM under the job's key (cluster.encryption); "
                  << "only the job's processes can read or make one";
  } else {
    zo.curve = side == Side::kServer ? keys->ForServer() : side == Side::kClient ? keys->ForClient() : *keys;
    PSF_LOG(Info) << "transport: CURVE on; "
                  << (side == Side::kServer ? "only the job's clients are admitted"
                                            : "talking only to the job's servers");
  }
  std::unique_ptr<Van> van = std::make_unique<ZmqVan>(zo);
  if (shm != nullptr) van = std::make_unique<ShmVan>(std::move(van), *shm);
  if (!faults.Any()) return van;
  PSF_LOG(Warning) << "transport faults injected into what this process sends: drop " << faults.drop_fraction
                   << ", duplicate " << faults.duplicate_fraction << ", delay " << faults.delay_fraction << " ("
                   << faults.delay_ms << " ms), reorder " << faults.reorder_fraction << "; seed " << faults.seed
                   << ", stream " << fault_stream;
  return std::unique_ptr<Van>(std::make_unique<FaultyVan>(std::move(van), faults));
}

// The ShmVan's options from the config and PSFORMER_SHM_JOB; nullopt when shared memory is off
// or the launcher did not ask for it.
StatusOr<std::optional<ShmVanOptions>> ShmOptionsFromEnvironment(const proto::JobConfig& config, Side side,
                                                                 const std::string& ipc_endpoint,
                                                                 std::shared_ptr<ShmFaultSwitch> shm_faults) {
  const char* job = std::getenv(kShmJobVariable);
  if (job == nullptr || !config.cluster().same_host_shm()) {
    if (!ipc_endpoint.empty()) {
      return Status::InvalidArgument("an ipc endpoint (" + ipc_endpoint +
                                     ") needs cluster.same_host_shm and the job id in " + kShmJobVariable +
                                     " (set by psformer train)");
    }
    return std::optional<ShmVanOptions>();
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long id = std::strtoull(job, &end, 10);
  if (*job == '\0' || *end != '\0' || errno != 0) {
    return Status::InvalidArgument(std::string(kShmJobVariable) + " = \"" + job +
                                   "\" is not a job id (a decimal number)");
  }
  ShmVanOptions o;
  o.job_id = id;
  o.ipc_endpoint = ipc_endpoint;
  o.max_bytes = static_cast<uint64_t>(config.cluster().shm_mib_per_process()) << 20;
  o.copy_threads = side == Side::kClient ? ClientPayloadThreads(config) : ServerPayloadThreads(config);
  o.faults = std::move(shm_faults);
  return std::optional<ShmVanOptions>(o);
}

StatusOr<std::unique_ptr<Van>> MakeFromEnvironment(const proto::JobConfig& config, uint64_t fault_stream,
                                                   int io_threads, Side side, const std::string& ipc_endpoint,
                                                   std::shared_ptr<ShmFaultSwitch> shm_faults, uint64_t shard_begin = 0,
                                                   std::function<bool()> stop_waiting = nullptr) {
  std::optional<CurveKeys> keys;
  if (config.cluster().authenticate()) {
    PSF_ASSIGN_OR_RETURN(keys, CurveKeysFromEnvironment());
  }
  PSF_ASSIGN_OR_RETURN(const std::optional<ShmVanOptions> shm,
                       ShmOptionsFromEnvironment(config, side, ipc_endpoint, std::move(shm_faults)));
  std::function<bool(const SendRank&)> yield_answer;
  if (side == Side::kServer && config.cluster().sums_first()) {
    if (ipc_endpoint.empty()) {
      PSF_LOG(Warning) << "cluster.sums_first: this server has no Unix socket (its run directory's path is too "
                          "long?), so its answers to other hosts do not wait for its host's sums";
    } else {
      PSF_ASSIGN_OR_RETURN(std::string path, HostLinkBoard::PathFor(ipc_endpoint));
      // Mapped on the first answer that asks: by then Bind has made the socket's directory.
      struct Board {
        std::string path;
        int slots = 1;
        uint64_t shard_begin = 0;
        std::shared_ptr<HostLinkBoard> board;
        bool failed = false;
      };
      auto state = std::make_shared<Board>(
          Board{std::move(path), std::max(1, HostGroups::Of(config).count()), shard_begin, nullptr, false});
      yield_answer = [state](const SendRank& rank) {
        if (!state->board && !state->failed) {
          auto board = HostLinkBoard::Open(state->path, state->slots);
          if (board.ok()) {
            state->board = std::move(*board);
          } else {
            state->failed = true;
            PSF_LOG(Warning) << "cluster.sums_first: " << board.status().message()
                             << "; this server's answers to other hosts do not wait for its host's sums";
          }
        }
        return state->board && state->board->SumsPending(rank.step, rank.begin - state->shard_begin);
      };
    }
  }
  return MakeVan(config, fault_stream, keys ? &*keys : nullptr, io_threads, side, shm ? &*shm : nullptr,
                 std::move(yield_answer), std::move(stop_waiting));
}

bool IsWildcardHost(const std::string& host) { return host.empty() || host == "*" || host == "0.0.0.0"; }

// True for an IPv4 or IPv6 literal ("10.0.0.2", "[::1]"), which ZeroMQ binds as it is.
bool IsAddressLiteral(const std::string& host) {
  if (host.empty()) return false;
  if (host.front() == '[') return true;
  return host.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace

std::string ServerBindEndpoint(const proto::JobConfig& config, const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (!IsWildcardHost(config.cluster().bind_host()) || endpoint.rfind(kTcp, 0) != 0) return endpoint;
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < kTcp.size()) return endpoint;
  const std::string host = endpoint.substr(kTcp.size(), colon - kTcp.size());
  if (host == "*" || IsAddressLiteral(host)) return endpoint;
  return std::string(kTcp) + "*" + endpoint.substr(colon);
}

StatusOr<std::unique_ptr<Van>> MakeServerVan(const proto::JobConfig& config, uint64_t fault_stream,
                                             uint64_t shard_begin, const std::string& ipc_endpoint,
                                             std::shared_ptr<ShmFaultSwitch> shm_faults) {
  return MakeFromEnvironment(config, fault_stream, 1, Side::kServer, ipc_endpoint, std::move(shm_faults), shard_begin);
}

StatusOr<std::unique_ptr<Van>> MakeClientVan(const proto::JobConfig& config, uint64_t fault_stream, int io_threads,
                                             std::shared_ptr<ShmFaultSwitch> shm_faults,
                                             std::function<bool()> stop_waiting) {
  return MakeFromEnvironment(config, fault_stream, io_threads, Side::kClient, "", std::move(shm_faults), 0,
                             std::move(stop_waiting));
}

StatusOr<std::unique_ptr<Van>> MakeAggregatorVan(const proto::JobConfig& config, uint64_t fault_stream,
                                                 std::shared_ptr<ShmFaultSwitch> shm_faults) {
  return MakeFromEnvironment(config, fault_stream, std::max(2, config.cluster().streams()), Side::kBoth, "",
                             std::move(shm_faults));
}

StatusOr<std::unique_ptr<Van>> MakeServerVanWithKeys(const proto::JobConfig& config, uint64_t fault_stream,
                                                     const CurveKeys* keys) {
  return MakeVan(config, fault_stream, keys, 1, Side::kServer);
}

StatusOr<std::unique_ptr<Van>> MakeClientVanWithKeys(const proto::JobConfig& config, uint64_t fault_stream,
                                                     const CurveKeys* keys, int io_threads) {
  return MakeVan(config, fault_stream, keys, io_threads, Side::kClient);
}

}  // namespace psformer
