// ParameterCopies: the parameters a host aggregator has pulled, per piece, kept for its workers.
// A piece of a step is copied once from the server's answer (its CRC-32C checked in the copy)
// into memory from the Van, shared memory on the same-host path, and every worker of the group
// reads that one copy in place. The two newest steps of each piece are kept (a restarted worker
// pulls the one before); older copies become spares whose memory is reused once no worker reads
// it any more.
//
// Thread safety: one thread (the aggregator's).
#ifndef PSFORMER_PSERVER_AGGREGATOR_PARAMETER_COPIES_H_
#define PSFORMER_PSERVER_AGGREGATOR_PARAMETER_COPIES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/proto/wire.pb.h"
#include "common/transport/van.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

// One piece's parameters of one step as the server sent them.
struct ParameterCopy {
  uint64_t epoch = 0;
  int64_t step = 0;
  proto::DType dtype = proto::FLOAT32;
  proto::Header reply;
  std::shared_ptr<void> bytes;
  size_t size = 0;      // of the payload
  size_t capacity = 0;  // of `bytes` (a part's size changes with the step's rows: room to reuse)
};

class ParameterCopies {
 public:
  // `pieces` pieces; memory from `van` (borrowed; it must outlive this).
  ParameterCopies(size_t pieces, Van* van) : van_(van), copies_(pieces), spare_(pieces) {}

  // The kept copy of `piece` for (epoch, step, dtype), or null.
  const ParameterCopy* Find(int piece, uint64_t epoch, int64_t step, proto::DType dtype) const;
  // A copy of the payload of `reply` (a server's PARAMS of `piece`, validated but for its
  // checksum) for `epoch`; nullopt when the bytes do not match the reply's CRC-32C.
  std::optional<ParameterCopy> CopyOf(int piece, uint64_t epoch, const WireMessage& reply);
  // Keeps `copy` as the newest of `piece`; copies older than the step before it become spares.
  void Keep(int piece, ParameterCopy copy);
  // Forgets every copy (a new recovery epoch); their memory stays as spares.
  void ForgetAll();

 private:
  // Memory for `copy` (its size set) of `piece`: the smallest of the piece's spares that holds
  // it and that nothing refers to any more (no worker still reads it), else new memory from the
  // Van, with a quarter more room when the copy is a part of a split piece (whose size changes
  // from step to step with the rows named): made once, not once a step. Sets bytes and capacity.
  void Memory(int piece, ParameterCopy* copy);

  Van* van_;
  std::vector<std::vector<ParameterCopy>> copies_;  // by piece: the newest steps' parameters
  std::vector<std::vector<ParameterCopy>> spare_;   // by piece: older copies, their memory to reuse
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_AGGREGATOR_PARAMETER_COPIES_H_
