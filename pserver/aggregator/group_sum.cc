#include "pserver/aggregator/group_sum.h"

#include <algorithm>
#include <cstring>

#include "common/bfloat16.h"
#include "common/crc32c.h"
#include "common/parallel_for.h"
#include "common/transport/van.h"
#include "pserver/wire/wire_message.h"

namespace psformer {

GroupSum::GroupSum(int workers, int piece, size_t n, proto::PushPart part)
    : piece(piece),
      part(part),
      shares(workers, n,
             part == proto::DENSE  ? PartsTaken::kDense
             : part == proto::ROWS ? PartsTaken::kRows
                                   : PartsTaken::kWhole),
      waiting(workers),
      table_crc(workers, 0) {}

void GroupSum::Begin(uint64_t new_epoch, int64_t new_step) {
  epoch = new_epoch;
  shares.Begin(new_step);
  waiting.assign(waiting.size(), std::nullopt);
  sequence = 0;
}

SummedShares SumShares(const PieceGradient& shares, size_t n, bool bf16, int threads, std::span<const ElementRun> table,
                       std::vector<uint32_t>* share_crcs) {
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  // fp32 sums are summed where they are sent from; bf16 ones are rounded into it. (Memory the
  // same-host path could lend was measured slower: a Van segment per sum still on loan.)
  SummedShares sum;
  const size_t table_bytes = table.size() * kRunBytes;
  sum.runs = static_cast<uint32_t>(table.size());
  sum.size = table_bytes + n * elem;
  sum.bytes = Van::HeapPayload(sum.size);
  if (table_bytes > 0) std::memcpy(sum.bytes.get(), table.data(), table_bytes);
  const int parts = ParallelPieces(threads, n, kSumBlock);
  std::vector<float> fp32(bf16 ? kSumBlock * static_cast<size_t>(parts) : 0);  // a block per part
  auto* out = static_cast<uint8_t*>(sum.bytes.get()) + table_bytes;
  PartCrcs crcs(parts);
  // Each share's CRC, per thread's part (combined below); a share's element size is its dtype's.
  const size_t workers = share_crcs != nullptr ? shares.parts.size() : 0;
  std::vector<PartCrcs> of_share(workers, PartCrcs(parts));
  ParallelFor(threads, n, kSumBlock, [&](int part, size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kSumBlock) {
      const size_t e = std::min(end, b + kSumBlock);
      if (bf16) {
        float* block = fp32.data() + static_cast<size_t>(part) * kSumBlock;
        SumInWorkerOrder(shares, b, e, block);
        FloatsToBf16(block, e - b, reinterpret_cast<uint16_t*>(out) + b);
      } else {
        SumInWorkerOrder(shares, b, e, reinterpret_cast<float*>(out) + b);
      }
      crcs.crc[part] = Crc32c(crcs.crc[part], out + b * elem, (e - b) * elem);
      for (size_t w = 0; w < workers; ++w) {
        const WireMessage& share = *shares.parts[w];
        const size_t share_elem = DTypeBytes(share.header.dtype());
        uint32_t& c = of_share[w].crc[part];
        ForEachPayloadSpan(share.payload, share_elem, b, e,
                           [&](const uint8_t* p, uint64_t, uint64_t count) { c = Crc32c(c, p, count * share_elem); });
        of_share[w].bytes[part] += (e - b) * share_elem;
      }
    }
    crcs.bytes[part] = (end - begin) * elem;
  });
  if (share_crcs != nullptr) {
    share_crcs->clear();
    for (const PartCrcs& c : of_share) share_crcs->push_back(c.Combined());
  }
  sum.crc32c = Crc32cCombine(Crc32c(0, sum.bytes.get(), table_bytes), crcs.Combined(), n * elem);
  return sum;
}

SummedShares SumRowShares(std::span<const RowsGradient* const> rows, bool bf16) {
  const SummedRows summed = SumRows(rows);
  const size_t table = summed.runs.size() * kRunBytes;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  // One buffer: the table (the payload's first frame), then the values.
  SummedShares sum;
  sum.runs = static_cast<uint32_t>(summed.runs.size());
  sum.size = table + summed.values.size() * elem;
  sum.bytes = Van::HeapPayload(sum.size);
  auto* out = static_cast<uint8_t*>(sum.bytes.get());
  if (table > 0) std::memcpy(out, summed.runs.data(), table);
  if (bf16) {
    FloatsToBf16(summed.values.data(), summed.values.size(), reinterpret_cast<uint16_t*>(out + table));
  } else if (!summed.values.empty()) {
    std::memcpy(out + table, summed.values.data(), summed.values.size() * sizeof(float));
  }
  sum.crc32c = Crc32c(0, out, sum.size);
  return sum;
}

}  // namespace psformer
