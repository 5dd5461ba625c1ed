// UpstreamRequests: a host aggregator's own requests to the servers (its group's sums, the pulls
// it makes for its workers, probes of an old epoch), each under a sequence of its own until the
// server answers it, and sent again when unanswered, with the same timing a worker's client
// uses (Resender: the wait counts from when the bytes left, and a pull's answer still arriving
// holds it back).
//
// Resending has two ends, as a worker's (docs/failure-model.md): a request unanswered for
// longer than timeout_ms since it was first sent (Overdue), and a server's shared-memory segment
// whose replies keep being refused for longer than the job's heartbeat timeout (SegmentRefused,
// counted by the worker's SegmentRefusals). Each returns a Status naming the server, the message
// and the step waited for; the aggregator's Run ends with it.
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
#include "common/status.h"
#include "common/transport/van.h"
#include "pserver/aggregator/worker_answers.h"
#include "pserver/client/resender.h"
#include "pserver/client/segment_refusals.h"
#include "pserver/timing.h"

namespace psformer {

// A request of the aggregator to a server, until answered.
struct Upstream {
  enum Kind { kSum, kPull, kProbe } kind = kSum;
  int piece = 0;
  proto::Header header;                 // as sent (resends send it again)
  std::shared_ptr<const void> payload;  // kSum: the sum's bytes...
  size_t payload_bytes = 0, elem = 4;
  size_t table_bytes = 0;          // ...(a ROWS sum's: its run table first, a frame of its own)...
  uint32_t payload_crc = 0;        // ...and their CRC-32C, computed in the summing pass
  uint64_t awaited_bytes = 0;      // kPull: the answer's size, which holds a resend back
  std::vector<Requester> waiting;  // kPull, kProbe: the workers to answer
  Resender::Send send;
  Resender::Clock::time_point first_sent{};  // set by UpstreamRequests::Send
};

// How long the aggregator waits for the servers.
struct UpstreamBounds {
  int retry_ms = 1000;                 // first resend of an unanswered request (cluster.retry_ms)
  int timeout_ms = kRequestTimeoutMs;  // a request unanswered this long ends the wait (Overdue)
  int shm_refusal_patience_ms = 5000;  // SegmentRefusals' patience; 0 = never give up
};

// Payload bytes sent to the servers, and resends.
struct UpstreamCounters {
  std::atomic<uint64_t> resends{0};   // requests to the servers sent again
  std::atomic<uint64_t> bytes_up{0};  // payload bytes sent to the servers (resends too)
};

class UpstreamRequests {
 public:
  // To `shards` servers, peer ServerPeer(k) on `van` (borrowed; `counters` too); identity of the
  // aggregator of `group` in job `job_id`; resends and gives up as `bounds` says.
  UpstreamRequests(Van* van, uint64_t job_id, int group, uint32_t incarnation, int shards, UpstreamBounds bounds,
                   size_t frame_bytes, UpstreamCounters* counters);

  // The name the aggregator's Van knows shard `shard` by.
  static std::string ServerPeer(int shard) { return "server-" + std::to_string(shard); }

  // Records `up` under a new sequence (stamping the aggregator's identity into its header) and
  // sends it; returns the sequence.
  uint64_t Send(Upstream up);
  // The request of `sequence`, or null (answered already, or forgotten with its epoch).
  Upstream* Find(uint64_t sequence);
  // The pull in flight of `piece` (of its `part`) for (step, dtype), or null.
  Upstream* PullOf(int piece, proto::PushPart part, int64_t step, proto::DType dtype);
  void Erase(uint64_t sequence) { requests_.erase(sequence); }
  // Every request, forgotten (a new recovery epoch).
  std::map<uint64_t, Upstream> TakeAll() { return std::exchange(requests_, {}); }
  // A reply from `shard` arrived (its link is moving).
  void Heard(int shard) { resender_.Heard(shard, Resender::Clock::now()); }
  // The sums to shards that `to` marks (by shard) not answered yet: how many, and the first by
  // (step, offset within its shard), with shard k beginning at shard_begins[k].
  struct Unanswered {
    int64_t step = 0;
    uint64_t offset = 0;
    uint64_t count = 0;
  };
  Unanswered SumsUnanswered(const std::vector<bool>& to, const std::vector<uint64_t>& shard_begins) const;
  // Sends again every request whose wait has passed.
  void ResendDue();
  // Unavailable when a request has gone unanswered for longer than timeout_ms since it was first
  // sent at `now`, naming it, its server and step; Ok otherwise.
  Status Overdue(Resender::Clock::time_point now) const;
  // A server's reply refused because its payload's shared-memory segment `segment` could not be
  // read (`why`), at `now`. Unavailable once that segment's refusals have gone on past the
  // patience (SegmentRefusals), naming the segment and every request still waited for; from then
  // on gave_up_on_segment() is true. Ok before.
  Status SegmentRefused(const std::string& segment, const std::string& why, Resender::Clock::time_point now);
  bool gave_up_on_segment() const { return gave_up_on_segment_; }

  // "PULL of step 3 (piece 2) from shard 1 (pserver-1)": what `up` waits for.
  static std::string Describe(const Upstream& up);

 private:
  void Transmit(uint64_t sequence);

  Van* van_;
  uint64_t job_id_;
  int group_;
  uint32_t incarnation_;
  size_t frame_bytes_;
  UpstreamCounters* counters_;
  int timeout_ms_;
  Resender resender_;
  SegmentRefusals segment_refusals_;
  bool gave_up_on_segment_ = false;
  std::map<uint64_t, Upstream> requests_;  // by sequence
  uint64_t next_sequence_ = 1;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_AGGREGATOR_UPSTREAM_REQUESTS_H_
