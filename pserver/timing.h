// Timing that the parameter-server client and the server must agree on. The client's resend
// schedule and how long a server stays up after the job ends depend on each other: a server that
// told a worker "job finished" stays long enough to answer that worker's next resend, in case
// the first answer was lost. Keeping both here makes the dependency a compile-time fact.
//
// Hang detection of whole processes (the supervisor's heartbeat pipe) is separate and configured:
// cluster.heartbeat_interval_ms and cluster.heartbeat_timeout_ms (common/proto/config.proto).
// The HEARTBEAT message only shows that a server answers; it carries no timing.
#ifndef PSFORMER_PSERVER_TIMING_H_
#define PSFORMER_PSERVER_TIMING_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace psformer {

// A request unanswered after retry_ms (cluster.retry_ms) is sent again after 2x, 4x, and then
// every 8x retry_ms: the interval doubles this many times and then stays.
inline constexpr int kMaxRetryDoublings = 3;

// How long the client waits after its `sends`-th send (1 = the first) before sending again.
inline std::chrono::milliseconds RetryInterval(int retry_ms, int sends) {
  return std::chrono::milliseconds(static_cast<int64_t>(retry_ms) << std::min(sends - 1, kMaxRetryDoublings));
}

// A request to a server unanswered this long after it was first sent is given up on, with a
// message naming it: a worker's Wait (PsClientOptions::timeout_ms) and a host group's
// aggregator (HostAggregatorOptions::timeout_ms) end there, and their supervisors restart them.
// Long enough for a BSP pull that waits for the slowest worker's step.
inline constexpr int kRequestTimeoutMs = 600000;

// The slowest link the client's resends allow for: a pull's answer of B bytes is waited for
// B / this longer before the pull is sent again (Resender). On a slower link an answer may be
// asked for twice, which costs bytes, never correctness. 1 Gbit/s.
inline constexpr uint64_t kSlowestLinkBytesPerSecond = 125'000'000;

// The longest interval between two sends of one request (without payload or awaited answers).
inline std::chrono::milliseconds LongestRetryInterval(int retry_ms) {
  return RetryInterval(retry_ms, kMaxRetryDoublings + 1);
}

// A server that has refused a request as "job finished" stops this long after every worker is
// done: the longest resend interval, lengthened for a pull of all `shard_bytes` (Resender), plus
// a margin for delivery, so a worker whose refusal was lost hears it again on its next resend.
inline std::chrono::milliseconds ServerLingerAfterJobEnd(int retry_ms, uint64_t shard_bytes = 0) {
  return LongestRetryInterval(retry_ms) + std::chrono::milliseconds(shard_bytes * 1000 / kSlowestLinkBytesPerSecond) +
         std::chrono::milliseconds(1000);
}

// After the coordinator ends the job, a server waits at most this long for every worker it has
// heard from to say it is done, then stops anyway.
inline constexpr std::chrono::seconds kServerFinishDeadline{60};

// A goodbye (SHUTDOWN) whose ACK is lost with its exiting server is not resent forever: the
// client waits this long, then takes it as done.
inline std::chrono::milliseconds ShutdownGrace(int retry_ms) {
  return std::chrono::milliseconds(std::max(retry_ms, 100) * 10);
}

}  // namespace psformer

#endif  // PSFORMER_PSERVER_TIMING_H_
