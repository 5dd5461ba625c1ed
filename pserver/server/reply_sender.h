// ReplySender: how a parameter shard answers. Every reply carries the shard's identity, the
// request's step and sequence (so the client matches it to its request) and the shard's
// recovery epoch; a refusal is an ERROR with its reason, counted and logged.
//
// Thread safety: one thread (the server loop).
#ifndef PSFORMER_PSERVER_SERVER_REPLY_SENDER_H_
#define PSFORMER_PSERVER_SERVER_REPLY_SENDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/proto/wire.pb.h"
#include "common/transport/van.h"
#include "pserver/recovery/recovery_epoch.h"
#include "pserver/wire/reject_reason.h"

namespace psformer {

class ReplySender {
 public:
  // Borrows `van`, `epoch` and `rejected`, which must outlive it.
  ReplySender(Van* van, uint64_t job_id, int shard, const RecoveryEpoch* epoch, RejectCounters* rejected);

  // A reply of `type` to `request`, without payload or flags yet.
  proto::Header Header(const proto::Header& request, proto::MessageType type) const;
  // Sends `header` and `payload` to `peer`; a failure is logged (the client will resend).
  void Send(const std::string& peer, proto::Header header, std::vector<Frame> payload = {});
  // The same with the payload's CRC-32C already known (REQUIRES: payload_crc32c ==
  // PayloadCrc32c(payload)), so a large payload is not read once more per reply.
  void Send(const std::string& peer, proto::Header header, std::vector<Frame> payload, uint32_t payload_crc32c);
  // ACK (or `type`, e.g. HEARTBEAT) to `request`; `duplicate`: a push already held.
  void Answer(const std::string& peer, const proto::Header& request, proto::MessageType type = proto::ACK,
              bool duplicate = false);
  // ERROR with `why`, counted and logged. `request` null: a message that did not even parse.
  void Refuse(const std::string& peer, const proto::Header* request, const Rejection& why);

 private:
  // Sends `message` (a reply of `type`); a failure is logged.
  void SendEncoded(proto::MessageType type, RawMessage message);

  Van* van_;
  uint64_t job_id_;
  int shard_;
  const RecoveryEpoch* epoch_;
  RejectCounters* rejected_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_REPLY_SENDER_H_
