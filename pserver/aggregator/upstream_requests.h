// UpstreamRequests: a host aggregator's own requests to the servers (its group's sums, the pulls
// it makes for its workers, probes of an old epoch), each under a sequence of its own until the
// server answers it, and sent again when unanswered, with the same timing a worker's client
// uses (Resender: the wait counts from when the bytes left, and a pull's answer still arriving
// holds it back).
//
// Thread safety: one thread (the aggregator's).
#ifndef PSFORMER_PSERVER_AGGREGATOR_UPSTREAM_REQUESTS_H_
#define PSFORMER_PSERVER_AGGREGATOR_UPSTREAM_REQUESTS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/proto/wire.pb.h"
#include "common/transport/van.h"
#include "pserver/aggregator/worker_answers.h"
#include "pserver/client/resender.h"

namespace psformer {

// A request of the aggregator to a server, until answered.
struct Upstream {
  enum Kind { kSum, kPull, kProbe } kind = kSum;
  int piece = 0;
  proto::Header header;                 // as sent (resends send it again)
  std::shared_ptr<const void> payload;  // kSum: the sum's bytes...
  size_t payload_bytes = 0, elem = 4;
  uint32_t payload_crc = 0;        // ...and their CRC-32C, computed in the summing pass
  uint64_t awaited_bytes = 0;      // kPull: the answer's size, which holds a resend back
  std::vector<Requester> waiting;  // kPull, kProbe: the workers to answer
  Resender::Send send;
};

// Payload bytes sent to the servers, and resends.
struct UpstreamCounters {
  std::atomic<uint64_t> resends{0};   // requests to the servers sent again
  std::atomic<uint64_t> bytes_up{0};  // payload bytes sent to the servers (resends too)
};

class UpstreamRequests {
 public:
  // To `shards` servers, peer ServerPeer(k) on `van` (borrowed; `counters` too); identity of the
  // aggregator of `group` in job `job_id`; resends after `retry_ms`.
  UpstreamRequests(Van* van, uint64_t job_id, int group, uint32_t incarnation, int shards, int retry_ms,
                   size_t frame_bytes, UpstreamCounters* counters);

  // The name the aggregator's Van knows shard `shard` by.
  static std::string ServerPeer(int shard) { return "server-" + std::to_string(shard); }

  // Records `up` under a new sequence (stamping the aggregator's identity into its header) and
  // sends it; returns the sequence.
  uint64_t Send(Upstream up);
  // The request of `sequence`, or null (answered already, or forgotten with its epoch).
  Upstream* Find(uint64_t sequence);
  // The pull in flight of `piece` for (step, dtype), or null.
  Upstream* PullOf(int piece, int64_t step, proto::DType dtype);
  void Erase(uint64_t sequence) { requests_.erase(sequence); }
  // Every request, forgotten (a new recovery epoch).
  std::map<uint64_t, Upstream> TakeAll() { return std::exchange(requests_, {}); }
  // A reply from `shard` arrived (its link is moving).
  void Heard(int shard) { resender_.Heard(shard, Resender::Clock::now()); }
  // Sends again every request whose wait has passed.
  void ResendDue();

 private:
  void Transmit(uint64_t sequence);

  Van* van_;
  uint64_t job_id_;
  int group_;
  uint32_t incarnation_;
  size_t frame_bytes_;
  UpstreamCounters* counters_;
  Resender resender_;
  std::map<uint64_t, Upstream> requests_;  // by sequence
  uint64_t next_sequence_ = 1;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_AGGREGATOR_UPSTREAM_REQUESTS_H_
