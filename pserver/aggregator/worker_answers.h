// WorkerAnswers: how a host aggregator answers its workers, as their shards would (the server's
// ReplySender). An answer is the server's reply (or one made here): only the fields that name
// the request are the worker's own. A refusal is an ERROR with its reason, counted and logged.
//
// Thread safety: one thread (the aggregator's).
#ifndef PSFORMER_PSERVER_AGGREGATOR_WORKER_ANSWERS_H_
#define PSFORMER_PSERVER_AGGREGATOR_WORKER_ANSWERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/proto/wire.pb.h"
#include "common/transport/van.h"
#include "pserver/aggregator/parameter_copies.h"
#include "pserver/wire/reject_reason.h"

namespace psformer {

// Whom to answer: a worker's request as it came.
struct Requester {
  std::string peer;
  proto::Header request;
};

class WorkerAnswers {
 public:
  // Borrows `van`, `epoch` (the aggregator's recovery epoch) and `rejected`, which must outlive it.
  WorkerAnswers(Van* van, uint64_t job_id, int group, size_t frame_bytes, const uint64_t* epoch,
                RejectCounters* rejected);

  // Answers `to` with `reply` as the answer to its own request; `crc`: the payload's CRC-32C,
  // when known. A failure to send is logged (the worker sends again).
  void Answer(const Requester& to, proto::Header reply, std::vector<Frame> payload = {},
              std::optional<uint32_t> crc = std::nullopt);
  // ACK; `duplicate`: the push was already held or applied.
  void Ack(const Requester& to, bool duplicate = false);
  // The parameters of `copy`, read in place.
  void AnswerFromCopy(const Requester& to, const ParameterCopy& copy);
  // ERROR with `why`, counted and logged. `request` null: a message that did not even parse.
  void Refuse(const std::string& peer, const proto::Header* request, const Rejection& why);

 private:
  Van* van_;
  uint64_t job_id_;
  int group_;
  size_t frame_bytes_;
  const uint64_t* epoch_;
  RejectCounters* rejected_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_AGGREGATOR_WORKER_ANSWERS_H_
