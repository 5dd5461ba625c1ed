// Resender: when a part of a request that has no answer yet is sent again (ps-lite keeps the same
// policy in a class of the same name). It owns the timing only; PsClient does the sending.
//
// A part is presumed lost only once its bytes have left this process. A push's payload can sit
// in the transport's queue for seconds behind a slow link (a 126 MB gradient takes 0.4 s at
// 2.5 Gbit/s, longer when workers share the link); sending it again then would only add bytes to
// the link that is holding it up. So the wait before a resend counts from when the transport let
// go of the part's last frame (it has been handed to the kernel, or dropped), not from the send
// call, and a part whose frames the transport still holds is never due. Parts without payload
// (PULL, HELLO, ...) leave at once.
//
// Answers move the other way: a pull's answer of tens of MB can be on the wire for longer than
// retry_ms, and a server answers a repeated PULL again, so a resend too early doubles the bytes
// on that link. Two allowances keep that from happening while the link is moving: the wait counts
// from the last reply heard from the same server (pieces arriving show that the link is busy
// with this client's answers), and it is lengthened by the bytes still awaited from that server
// at kSlowestLinkBytesPerSecond (pserver/timing.h). The wait backs off: retry_ms after the first
// send, then 2x, 4x and 8x retry_ms.
//
// Thread safety: Track's token may be released on any thread (a ZeroMQ I/O thread); the rest is
// the client's one thread.
#ifndef PSFORMER_PSERVER_CLIENT_RESENDER_H_
#define PSFORMER_PSERVER_CLIENT_RESENDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace psformer {

class Resender {
 public:
  using Clock = std::chrono::steady_clock;

  // One send of one part: when it was handed to the transport, and when the transport let go of
  // its payload (written by the token's release, on the transport's thread).
  class Send {
   public:
    Send() = default;
    int count() const { return count_; }
    // Whether the transport still holds this send's payload.
    bool in_transport() const { return left_ != nullptr && left_->load() == kNotYet; }

   private:
    friend class Resender;
    static constexpr int64_t kNotYet = INT64_MIN;  // left_ until the payload has left
    Clock::time_point sent_at_{};
    int count_ = 0;                               // sends of the part so far (1 = the first).
    std::shared_ptr<std::atomic<int64_t>> left_;  // Clock ticks when the payload left; null: no payload.
  };

  // `retry_ms` <= 0: never resend. `peers`: the servers, 0 .. peers - 1.
  Resender(int retry_ms, int peers) : retry_ms_(retry_ms), heard_(peers) {}

  // Records a send of a part at `now` (after `previous`, the part's earlier sends). For a payload,
  // returns the owner its frames must hold instead of `payload_owner`: it keeps `payload_owner`
  // alive and, when the transport releases the last frame, marks the payload as gone.
  // `payload_owner` null: a message without payload (returns null).
  std::shared_ptr<const void> Sent(Send* send, Clock::time_point now, std::shared_ptr<const void> payload_owner) const;

  // A reply from `peer` arrived at `now`.
  void Heard(int peer, Clock::time_point now) { heard_[peer] = now; }

  // Whether `send`, a part sent to `peer` while `awaited_bytes` of answers are still to come from
  // that peer, is due to be sent again at `now`: its payload has left the transport, and the
  // wait (Wait) has passed since the latest of: the send, its payload leaving, a reply from `peer`.
  bool Due(const Send& send, int peer, uint64_t awaited_bytes, Clock::time_point now) const;
  // The wait after a part's `sends`-th send with `awaited_bytes` of answers to come.
  std::chrono::milliseconds Wait(int sends, uint64_t awaited_bytes = 0) const;

 private:
  int retry_ms_;
  std::vector<Clock::time_point> heard_;  // last reply per peer
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_CLIENT_RESENDER_H_
