// FaultyVan: a Van that injects transport faults into what it sends (for fault injection),
// wrapped around any other Van. For each message handed to Send it draws one decision:
//   drop       the message is lost;
//   duplicate  it is sent twice in a row;
//   delay      it is held for delay_ms, so later messages overtake it;
//   reorder    it is held until the next message to the same peer has gone out (or at most
//              delay_ms, so that a reordered message is never a lost one);
//   deliver    sent at once.
// Receiving is untouched. The decision for the k-th Send is a pure function of (seed, stream, k)
// (Philox, common/philox.h): a run with the same seed makes the same decisions whatever the
// timing, and distinct streams (one per process, FaultStream below) make independent ones.
//
// Held messages go out during a later Send or Recv once due (a Van has no thread of its own);
// Recv shortens its wait so that a due message is not held back by an idle receiver.
//
// Thread safety: as any Van, one thread at a time.
#ifndef PSFORMER_COMMON_TRANSPORT_FAULTY_VAN_H_
#define PSFORMER_COMMON_TRANSPORT_FAULTY_VAN_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/transport/forwarding_van.h"

namespace psformer {

struct FaultyVanOptions {
  // Fractions of sent messages, each in [0, 1], together at most 1; the rest are delivered.
  double drop_fraction = 0.0;
  double duplicate_fraction = 0.0;
  double delay_fraction = 0.0;
  double reorder_fraction = 0.0;
  int delay_ms = 50;    // how long a delayed message is held (>= 0).
  uint64_t seed = 7;    // fault.seed.
  uint64_t stream = 0;  // this process's stream (FaultStream).

  // From the config's fault section (fault.*_fraction, delay_ms, seed).
  static FaultyVanOptions FromConfig(const proto::FaultConfig& fault, uint64_t stream);
  // OK, or which field is out of range and why.
  Status Validate() const;
  bool Any() const { return drop_fraction + duplicate_fraction + delay_fraction + reorder_fraction > 0.0; }
};

// Distinct fault streams per process of a job.
enum class FaultRole : uint64_t { kWorker = 0, kServer = 1, kControl = 2, kAggregator = 3 };
constexpr uint64_t FaultStream(FaultRole role, uint32_t index) { return (static_cast<uint64_t>(role) << 32) | index; }

enum class FaultAction { kDeliver, kDrop, kDuplicate, kDelay, kReorder };
const char* FaultActionName(FaultAction action);

// The decision for the `counter`-th message (0-based) of a stream.
FaultAction DecideFault(const FaultyVanOptions& options, uint64_t counter);

// What a FaultyVan did so far.
struct FaultyVanStats {
  uint64_t messages = 0;  // Send calls decided.
  uint64_t delivered = 0;
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t delayed = 0;
  uint64_t reordered = 0;
};

class FaultyVan : public ForwardingVan {
 public:
  // REQUIRES: options.Validate() is OK.
  FaultyVan(std::unique_ptr<Van> inner, FaultyVanOptions options);
  ~FaultyVan() override;  // held messages are sent before the inner Van goes.

  // Decides the message's fate; errors are the inner Van's, for messages sent now.
  Status Send(RawMessage message) override;
  StatusOr<std::optional<RawMessage>> Recv(int timeout_ms) override;

  const FaultyVanStats& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    RawMessage message;
    Clock::time_point due;
    bool until_next = false;  // reorder: also leaves right after the next message to its peer.
  };
  // Sends held messages that are due (or, with `peer`, reorder-held ones for that peer).
  void SendHeld(const std::string* after_peer);
  void SendNow(RawMessage message);

  FaultyVanOptions options_;
  uint64_t counter_ = 0;
  std::deque<Held> held_;  // in the order they were held.
  FaultyVanStats stats_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_FAULTY_VAN_H_
