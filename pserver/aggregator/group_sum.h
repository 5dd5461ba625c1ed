// GroupSum: a host group's shares of one piece for one step, collected as a server collects a
// flat job's pushes (GradientAggregator: held in their received frames until every worker's is
// in), the workers to answer once the server has the sum, and the sum in flight. A piece pushed
// in two parts (cluster.split_embedding) has a GroupSum per part, DENSE and ROWS: each part is
// collected, summed, sent and answered on its own, as a whole piece is.
// SumShares: the summing pass, the servers' worker-order sum (SumInWorkerOrder), with the
// bytes to send (rounded to bf16 where the job pushes bf16) and their CRC-32C made block by
// block in the same pass. SumRowShares: the same for ROWS parts (SumRows: the union of their
// runs, each element summed in worker order), sent as a run table and then the values.
//
// Thread safety: one thread (the aggregator's); SumShares fans out to `threads` threads.
#ifndef PSFORMER_PSERVER_AGGREGATOR_GROUP_SUM_H_
#define PSFORMER_PSERVER_AGGREGATOR_GROUP_SUM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "pserver/aggregator/worker_answers.h"
#include "pserver/server/gradient_aggregator.h"
#include "pserver/wire/gradient_rows.h"

namespace psformer {

struct GroupSum {
  // A group of `workers` pushing `part` (WHOLE, or one part of a split piece) of piece `piece`,
  // of `n` elements.
  GroupSum(int workers, int piece, size_t n, proto::PushPart part);
  // Forgets everything (releasing held frames) and starts collecting (epoch, step).
  void Begin(uint64_t new_epoch, int64_t new_step);

  int piece;
  proto::PushPart part;
  uint64_t epoch = 0;
  GradientAggregator shares;                      // by the worker's place in the group; its step is the sum's
  std::vector<std::optional<Requester>> waiting;  // answered with the server's answer to the sum
  std::vector<uint32_t> table_crc;                // a named DENSE share's run table's CRC-32C
  uint64_t sequence = 0;                          // of the sum in flight to the server; 0 = none
};

// A group's sum of a piece (or of one part of it), as it is sent.
struct SummedShares {
  std::shared_ptr<void> bytes;  // the payload: n elements, or a ROWS sum's run table and values
  size_t size = 0;              // bytes
  uint32_t crc32c = 0;          // of all `size` bytes
  uint32_t runs = 0;            // ROWS, named DENSE: the table's runs, the first runs x kRunBytes of `bytes`
};

// The sum of `shares` (n elements each) in worker order, rounded to bf16 when `bf16`; after
// `table` (the runs a named DENSE sum names, its first frame) when there is one. With
// `share_crcs`, also each share's payload CRC-32C (its values' bytes, in worker order), made in
// the same pass while the block is in cache: the shares' checksums cost no pass of their own.
SummedShares SumShares(const PieceGradient& shares, size_t n, bool bf16, int threads,
                       std::span<const ElementRun> table = {}, std::vector<uint32_t>* share_crcs = nullptr);
// The sum of ROWS parts `rows` in worker order (SumRows), its values rounded to bf16 when `bf16`.
SummedShares SumRowShares(std::span<const RowsGradient* const> rows, bool bf16);

}  // namespace psformer

#endif  // PSFORMER_PSERVER_AGGREGATOR_GROUP_SUM_H_
