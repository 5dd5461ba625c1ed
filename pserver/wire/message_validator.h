// Checks of everything a message carries by itself, before anything uses it: type, job, sender,
// destination shard, element range, payload size against dtype and range, frame alignment,
// checksum. Checks that need the receiver's state (stale or future step, stale incarnation,
// duplicates) are the receiver's; it reports them with the same RejectReasons.
// Cheap checks come first, the checksum (a pass over the payload) last.
#ifndef PSFORMER_PSERVER_WIRE_MESSAGE_VALIDATOR_H_
#define PSFORMER_PSERVER_WIRE_MESSAGE_VALIDATOR_H_

#include <cstdint>
#include <vector>

#include "pserver/wire/wire_message.h"

namespace psformer {

// What a server knows about the job and itself.
struct ServerScope {
  uint64_t job_id = 0;
  int workers = 1;     // senders WORKER 0 .. workers-1.
  int aggregators = 0;  // senders AGGREGATOR 0 .. aggregators-1 (host groups); 0 = the flat path.
  int shard = 0;       // this server's index.
  uint64_t begin = 0;  // this shard's element range [begin, end).
  uint64_t end = 0;
  int threads = 1;  // for the checksum pass over a payload (PayloadCrc32c)
  // Where the shard's pieces begin (absolute), then `end` (PieceTable): a PUSH or PULL names a
  // run of whole pieces. Empty: the whole shard only.
  std::vector<uint64_t> piece_bounds;
  // Per piece (of piece_bounds): 1 where the job pushes it in two parts, DENSE and ROWS (the
  // shared embedding's pieces with cluster.split_embedding); every other push is WHOLE.
  std::vector<uint8_t> split_pieces;
};

// For a message arriving at a server. Accepted types: PUSH and PULL (from workers, or with host
// summing from the groups' aggregators, which then send every PUSH; PULL also from the coordinator), HELLO and
// HEARTBEAT (any member), CHECKPOINT and SHUTDOWN (coordinator or supervisor). PUSH and PULL name a run of whole pieces
// of the shard (piece_bounds); PUSH carries it in FLOAT32 or BFLOAT16 with step >= 1; other types carry no payload.
// `defer_element_checksum`: every check but the payload's CRC-32C of a WHOLE or DENSE PUSH, which the receiver makes in
// its summing pass (a host aggregator: SumShares) and refuses there; a ROWS push's is checked here.
Refusal ValidateAtServer(const WireMessage& msg, const ServerScope& scope, bool defer_element_checksum = false);

// What a worker-side client knows.
struct ClientScope {
  uint64_t job_id = 0;
  int shards = 1;
  uint64_t total = 0;  // elements of the flat parameter vector.
};

// For a reply arriving at a client: PARAMS (over part of the sender shard's range), ACK,
// ERROR, HEARTBEAT, from SERVER `shard` < shards of this job. `defer_checksum`: every check but
// the payload's CRC-32C, which the caller makes in the pass that copies it (CopyCheckedFloats).
Refusal ValidateAtClient(const WireMessage& msg, const ClientScope& scope, bool defer_checksum = false);

}  // namespace psformer

#endif  // PSFORMER_PSERVER_WIRE_MESSAGE_VALIDATOR_H_
