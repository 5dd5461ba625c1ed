#include "common/block_crcs.h"

namespace psformer {

BlockCrcs::BlockCrcs(const void* base, size_t bytes, Entry* entries)
    : base_(static_cast<const uint8_t*>(base)), bytes_(bytes), entries_(entries) {}

BlockCrcs::BlockCrcs(const void* base, size_t bytes)
    : base_(static_cast<const uint8_t*>(base)),
      bytes_(bytes),
      owned_(Blocks(bytes), Entry{0, 0}),
      entries_(owned_.data()) {}

std::optional<uint32_t> BlockCrcs::Crc32cOf(const void* p, size_t n) const {
  const auto* bytes = static_cast<const uint8_t*>(p);
  if (bytes < base_ || bytes > base_ + bytes_ || n > static_cast<size_t>(base_ + bytes_ - bytes)) return std::nullopt;
  const size_t begin = static_cast<size_t>(bytes - base_), end = begin + n;
  const auto [first, last] = WholeBlocks(begin, end);
  const uint32_t now = stamp();
  bool known = false;
  for (size_t b = first; b < last && !known; ++b) known = entries_[b].stamp == now;
  if (!known) return std::nullopt;
  const size_t head_end = first * kCrcBlockBytes;
  uint32_t crc = Crc32c(0, base_ + begin, head_end - begin);
  for (size_t b = first; b < last; ++b) {
    const Entry e = entries_[b];
    crc = e.stamp == now ? Crc32cAppendBlock(crc, e.crc) : Crc32c(crc, base_ + b * kCrcBlockBytes, kCrcBlockBytes);
  }
  const size_t tail_begin = last * kCrcBlockBytes;
  return Crc32c(crc, base_ + tail_begin, end - tail_begin);
}

}  // namespace psformer
