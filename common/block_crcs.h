// BlockCrcs: the CRC-32C of each whole kCrcBlockBytes block of a byte array, recorded by whoever
// writes the array (a GPU beside its copy of the array to the host, or a copy pass that checksums
// what it copies), so that the CRC of any stretch of the array is had without reading the
// stretch again: only its unaligned ends, and blocks with no CRC recorded, are read.
//
// A recorded CRC counts only while it carries the record's current stamp: Invalidate (for a
// writer of the array that records nothing) makes every one recorded so far stale at once.
//
// Thread safety: Record and Invalidate from one thread (the writer's); Crc32cOf from any other,
// for bytes whose writing (and recording) happened before the call and that no one writes
// during it. The entries may also be written by a device's copy (the caller's array is the one
// it writes).
#ifndef PSFORMER_COMMON_BLOCK_CRCS_H_
#define PSFORMER_COMMON_BLOCK_CRCS_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "common/crc32c.h"

namespace psformer {

class BlockCrcs {
 public:
  struct Entry {
    uint32_t crc;    // Crc32c(0, the block)
    uint32_t stamp;  // the record's stamp when it was made; 0: never
  };

  // A record for base[0, bytes), held in `entries` (the caller's: Blocks(bytes) of them, zeroed,
  // e.g. pinned memory a device's copy writes), which must outlive it.
  BlockCrcs(const void* base, size_t bytes, Entry* entries);
  // The same, holding its entries itself (host memory a host thread writes).
  BlockCrcs(const void* base, size_t bytes);
  BlockCrcs(const BlockCrcs&) = delete;
  BlockCrcs& operator=(const BlockCrcs&) = delete;

  static size_t Blocks(size_t bytes) { return bytes / kCrcBlockBytes; }
  // The whole blocks inside bytes [begin, end) of the array, as [first, last).
  static std::pair<size_t, size_t> WholeBlocks(size_t begin, size_t end) {
    const size_t first = (begin + kCrcBlockBytes - 1) / kCrcBlockBytes, last = end / kCrcBlockBytes;
    return {first, last > first ? last : first};
  }

  uint32_t stamp() const { return stamp_.load(std::memory_order_acquire); }
  // Block `block`'s CRC is `crc` (with the current stamp).
  void Record(size_t block, uint32_t crc) { entries_[block] = Entry{crc, stamp()}; }
  // Every CRC recorded so far is stale (the array was written without recording).
  void Invalidate() { stamp_.fetch_add(1, std::memory_order_acq_rel); }
  // Writes bytes [begin, end) of the array by `write(from, to)` (byte offsets, from < to), the
  // whole blocks a group at a time, and records each group's CRCs right after its write, while it
  // is in the core's cache: a copy that checksums what it copies, in one pass.
  template <typename Write>
  void WriteAndRecord(size_t begin, size_t end, const Write& write) {
    const auto [first, last] = WholeBlocks(begin, end);
    const size_t head_end = std::min(end, first * kCrcBlockBytes);
    if (head_end > begin) write(begin, head_end);
    constexpr size_t kGroup = 12;  // 48 KiB
    uint32_t crc[kGroup];
    for (size_t b = first; b < last; b += kGroup) {
      const size_t count = std::min(kGroup, last - b);
      write(b * kCrcBlockBytes, (b + count) * kCrcBlockBytes);
      BlockCrc32cs(base_ + b * kCrcBlockBytes, count, crc);
      for (size_t i = 0; i < count; ++i) Record(b + i, crc[i]);
    }
    const size_t tail_begin = std::min(end, std::max(head_end, last * kCrcBlockBytes));
    if (end > tail_begin) write(tail_begin, end);
  }

  // Crc32c(0, p, n) when [p, p + n) lies in the array and some block of it has a CRC recorded
  // under the current stamp (reading only what no recorded CRC covers); nullopt otherwise, for
  // the caller to checksum the bytes its own way.
  std::optional<uint32_t> Crc32cOf(const void* p, size_t n) const;

 private:
  const uint8_t* base_;
  size_t bytes_;
  std::vector<Entry> owned_;  // the entries, where the record holds them
  Entry* entries_;
  std::atomic<uint32_t> stamp_{1};
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_BLOCK_CRCS_H_
