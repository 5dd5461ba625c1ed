// SegmentRefusals: when a client stops resending to a server whose shared-memory segment it keeps
// refusing (docs/failure-model.md, "Shared memory between roles of one host").
//
// A payload in shared memory that the receiver cannot read (ShmVan refuses its descriptor:
// RawMessage::refused_segment) is normally a one-off: its sender died and the restart makes new
// segments, or a lent slot was taken back; the request is sent again and answered through
// another slot. Such refusals come in a burst (every part in flight at once) and end. The same
// segment refused again and again, for longer than the job gives a silent process (the
// heartbeat timeout), will not heal by resending: without a bound the client resends every 8 x
// retry_ms for ever and the job hangs with nothing on the console. This class draws that bound
// for both clients of the servers: PsClient (a worker's) and a host group's aggregator
// (pserver/aggregator/upstream_requests.h) then end their wait with a message naming the segment
// and what they waited for.
//
// A refusal more than forget_after_ms after the previous refusal of its segment starts the count
// afresh, so that rare one-off refusals of a live server's segment (hours apart) never add up.
//
// Thread safety: one thread (the client's).
#ifndef PSFORMER_PSERVER_CLIENT_SEGMENT_REFUSALS_H_
#define PSFORMER_PSERVER_CLIENT_SEGMENT_REFUSALS_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "common/proto/config.pb.h"

namespace psformer {

class SegmentRefusals {
 public:
  using Clock = std::chrono::steady_clock;

  // A segment refused at least kMinRefusals times over at least `patience_ms` is given up on.
  static constexpr int kMinRefusals = 3;

  // `patience_ms` <= 0: never give up (the client's resends and timeout_ms alone decide).
  SegmentRefusals(int patience_ms, int forget_after_ms)
      : patience_ms_(patience_ms), forget_after_ms_(forget_after_ms) {}

  // The patience a job's roles use: cluster.heartbeat_timeout_ms, or its default where hang
  // detection is off (0), so that there is a bound even then.
  static int JobPatienceMs(const proto::ClusterConfig& cluster);
  // A run of refusals ends when two of the longest resend intervals (pserver/timing.h) pass
  // without one, beyond the patience.
  static int ForgetAfterMs(int patience_ms, int retry_ms);

  // Records that a payload in `segment` was refused at `now` because `why`. Returns, once the
  // segment's refusals have gone on past the bound, what happened, as a sentence naming the
  // segment, the count, the time and the last reason; nullopt while there is no reason to stop.
  std::optional<std::string> Refused(const std::string& segment, const std::string& why, Clock::time_point now);

 private:
  struct Run {
    Clock::time_point first, last;  // the first and latest refusal of this run
    int count = 0;                  // refusals in the run
  };
  int patience_ms_;
  int forget_after_ms_;
  std::map<std::string, Run> runs_;  // by segment name; names carry a nonce, so there are few
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_CLIENT_SEGMENT_REFUSALS_H_
