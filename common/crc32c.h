// CRC-32C (Castagnoli), for payload and checkpoint checksums. Uses the SSE4.2 instruction
// where the CPU has it, a table otherwise; both give the same value.
#ifndef PSFORMER_COMMON_CRC32C_H_
#define PSFORMER_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace psformer {

// Extends `crc` (0 to start) over n bytes: Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The CRC of a + b from crc_a = Crc32c(0, a), crc_b = Crc32c(0, b) and b's length, without
// reading the bytes again: what lets pieces of a buffer be checksummed on separate threads.
// O(log len_b) small matrix products.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

// The CRC-32Cs of consecutive parts of one run of bytes, computed apart (one per ParallelFor
// piece), and the CRC of the whole run from them.
struct PartCrcs {
  explicit PartCrcs(int parts) : crc(parts, 0), bytes(parts, 0) {}
  uint32_t Combined() const {
    uint32_t whole = 0;
    for (size_t p = 0; p < crc.size(); ++p) whole = Crc32cCombine(whole, crc[p], bytes[p]);
    return whole;
  }
  std::vector<uint32_t> crc;
  std::vector<uint64_t> bytes;
};

// Copies n bytes from src to dst (not overlapping) and returns Crc32c(crc, src, n), in one pass
// over the source: each word read into the CRC register is stored at dst from the register file.
uint32_t CopyWithCrc32c(void* dst, const void* src, size_t n, uint32_t crc = 0);

// Crc32c(0, data, n) computed in up to `threads` pieces on threads of their own (ParallelFor).
uint32_t Crc32cParallel(const void* data, size_t n, int threads);

// One stretch of a longer byte string: n bytes at src, also copied to dst in the pass that reads
// them (dst nullptr: only read).
struct CrcSpan {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t n = 0;
};

// Crc32c(crc, the spans' bytes one after another), copying each span that has a dst as
// CopyWithCrc32c does. The bytes are split into up to `threads` equal pieces, whatever the
// spans' sizes, each checksummed (and copied) on a thread of its own; the pieces' CRCs are
// combined in order, so the result does not depend on `threads`.
uint32_t Crc32cSpans(const std::vector<CrcSpan>& spans, int threads, uint32_t crc = 0);

// The block a CRC-32C is recorded for where an array is written (block_crcs.h): small enough
// that a stretch's unaligned ends cost little to read again, large enough that joining blocks
// costs nothing beside reading them.
constexpr size_t kCrcBlockBytes = 4096;

// crcs[i] = Crc32c(0, src + i * kCrcBlockBytes, kCrcBlockBytes) for i < blocks; with dst, the
// bytes are also copied there in the same pass (CopyWithCrc32c's).
void BlockCrc32cs(const void* src, size_t blocks, uint32_t* crcs, void* dst = nullptr);

// Crc32cCombine(crc_a, crc_b, kCrcBlockBytes), by four table lookups.
uint32_t Crc32cAppendBlock(uint32_t crc_a, uint32_t crc_b);

// How a GPU computes a block's CRC (worker/backend/cuda/crc32c_kernels.h): 32 lanes each take
// the CRC register from 0 over 128 consecutive bytes (no inversions: the register is linear in
// the bytes), then pairs of neighbouring results are joined in five rounds, the left one moved on
// by the register's map for the right one's length (128, 256 ... 2048 zero bytes: `shift`, as 32
// columns of a GF(2) matrix), and `finish` turns the whole block's register into Crc32c(0, block).
struct Crc32cLaneConstants {
  uint32_t shift[5][32];
  uint32_t finish;
};
const Crc32cLaneConstants& Crc32cBlockLaneConstants();
// Crc32c(0, block, kCrcBlockBytes) computed exactly as the GPU does (the lanes one after the
// other): the kernel's reference twin, tested against Crc32c.
uint32_t Crc32cBlockByLanes(const void* block);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CRC32C_H_
