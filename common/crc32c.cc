#include "common/crc32c.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "common/parallel_for.h"

namespace psformer {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial.

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t Crc32cTable(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

// GF(2) linear maps on 32-bit CRC states, as 32 columns: Apply(op, v) = op * v.
using Gf2Operator = std::array<uint32_t, 32>;

uint32_t Apply(const Gf2Operator& op, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) out ^= op[i];
  }
  return out;
}

Gf2Operator Square(const Gf2Operator& op) {
  Gf2Operator sq;
  for (int i = 0; i < 32; ++i) sq[i] = Apply(op, op[i]);
  return sq;
}

// The map of the CRC register for `bytes` zero bytes (a power of two).
Gf2Operator ZeroBytesOperator(size_t bytes) {
  Gf2Operator op;  // one zero bit
  op[0] = kPoly;
  for (int i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
  for (size_t bits = 1; bits < 8 * bytes; bits *= 2) op = Square(op);
  return op;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of about 3 cycles and a throughput of 1 a cycle: one chain
// of it runs at a third of what the core can do. Large buffers are therefore taken kStripe bytes
// at a time from three places at once, in three independent chains, joined by the register's
// linear map for kStripe zero bytes (precomputed). Same value as one chain.
constexpr size_t kStripe = 4096;

// Feeds the three kStripe-byte stripes at p into the registers c0, c1, c2 (one each, in three
// independent chains) and, when kCopy, stores them at out as well.
template <bool kCopy>
__attribute__((target("sse4.2"))) inline void ThreeStripes(const uint8_t* p, [[maybe_unused]] uint8_t* out,
                                                           uint64_t* c0, uint64_t* c1, uint64_t* c2) {
  for (size_t i = 0; i < kStripe; i += 8) {
    uint64_t w0, w1, w2;
    std::memcpy(&w0, p + i, 8);
    std::memcpy(&w1, p + kStripe + i, 8);
    std::memcpy(&w2, p + 2 * kStripe + i, 8);
    *c0 = __builtin_ia32_crc32di(*c0, w0);
    *c1 = __builtin_ia32_crc32di(*c1, w1);
    *c2 = __builtin_ia32_crc32di(*c2, w2);
    if constexpr (kCopy) {
      std::memcpy(out + i, &w0, 8);
      std::memcpy(out + kStripe + i, &w1, 8);
      std::memcpy(out + 2 * kStripe + i, &w2, 8);
    }
  }
}

// Reads n bytes at p into the CRC register and, when kCopy, stores each word read at out as
// well: the copy costs no second pass over the source. One body for both, so that the fused
// routine computes exactly what Crc32c does.
template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const uint8_t* p, size_t n,
                                                          [[maybe_unused]] uint8_t* out) {
  static const Gf2Operator kShift = ZeroBytesOperator(kStripe);
  uint64_t c = crc;
  while (n >= 3 * kStripe) {
    uint64_t c1 = 0, c2 = 0;
    ThreeStripes<kCopy>(p, out, &c, &c1, &c2);
    // The register after the first stripe, fed the second from there (linear: shifted state xor
    // the second chain's own result), then the third.
    c = Apply(kShift, Apply(kShift, static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
    p += 3 * kStripe;
    n -= 3 * kStripe;
    if constexpr (kCopy) out += 3 * kStripe;
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    if constexpr (kCopy) {
      std::memcpy(out, &word, 8);
      out += 8;
    }
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = __builtin_ia32_crc32qi(c32, *p);
    if constexpr (kCopy) *out++ = *p;
    ++p;
    --n;
  }
  return c32;
}

// Crc32c(0, block) of the three kCrcBlockBytes blocks at p, in three chains at once, into
// crcs[0..2] (returned: crcs[0]); with out, the bytes are copied there too.
__attribute__((target("sse4.2"))) uint32_t Crc32cHardwareBlocks3(const uint8_t* p, uint8_t* out, uint32_t* crcs) {
  static_assert(kCrcBlockBytes == kStripe);
  uint64_t c0 = 0xFFFFFFFFu, c1 = 0xFFFFFFFFu, c2 = 0xFFFFFFFFu;
  if (out != nullptr) {
    ThreeStripes<true>(p, out, &c0, &c1, &c2);
  } else {
    ThreeStripes<false>(p, out, &c0, &c1, &c2);
  }
  crcs[1] = ~static_cast<uint32_t>(c1);
  crcs[2] = ~static_cast<uint32_t>(c2);
  return ~static_cast<uint32_t>(c0);
}
#endif

}  // namespace

// Appending len_b bytes to a maps the (pre- and post-inverted) CRC state linearly, as feeding
// len_b zero bytes does, then xors in crc_b; the inversions cancel. The map for one zero bit is
// the shift register's step; squaring it gives 2, 4, 8 ... bits, applied per set bit of len_b.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
  // The maps for 2^k zero bytes, k = 0 .. 63, made once: a combine then costs one Apply per set
  // bit of len_b instead of a squaring per bit (combines run per frame and per thread's part).
  static const std::array<Gf2Operator, 64> kZeroBytesPow2 = [] {
    std::array<Gf2Operator, 64> ops;
    Gf2Operator op;  // one zero bit
    op[0] = kPoly;
    for (int i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
    ops[0] = Square(Square(Square(op)));  // one zero byte
    for (size_t k = 1; k < ops.size(); ++k) ops[k] = Square(ops[k - 1]);
    return ops;
  }();
  for (size_t k = 0; len_b != 0; len_b >>= 1, ++k) {
    if (len_b & 1) crc_a = Apply(kZeroBytesPow2[k], crc_a);
  }
  return crc_a ^ crc_b;
}

void BlockCrc32cs(const void* src, size_t blocks, uint32_t* crcs, void* dst) {
  const auto* p = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) {
    // Three blocks at a time in three chains, as Crc32cHardware runs its stripes, each its own CRC.
    for (; blocks >= 3; blocks -= 3, p += 3 * kCrcBlockBytes, crcs += 3) {
      crcs[0] = Crc32cHardwareBlocks3(p, out, crcs);
      if (out != nullptr) out += 3 * kCrcBlockBytes;
    }
  }
#endif
  for (size_t i = 0; i < blocks; ++i, p += kCrcBlockBytes) {
    crcs[i] = out != nullptr ? CopyWithCrc32c(out, p, kCrcBlockBytes) : Crc32c(0, p, kCrcBlockBytes);
    if (out != nullptr) out += kCrcBlockBytes;
  }
}

uint32_t Crc32cAppendBlock(uint32_t crc_a, uint32_t crc_b) {
  // The register's map for kCrcBlockBytes zero bytes as four tables of its bytes' images.
  static const std::array<std::array<uint32_t, 256>, 4> kTables = [] {
    const Gf2Operator op = ZeroBytesOperator(kCrcBlockBytes);
    std::array<std::array<uint32_t, 256>, 4> t{};
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = Apply(op, b << (8 * k));
    }
    return t;
  }();
  return kTables[0][crc_a & 0xFF] ^ kTables[1][(crc_a >> 8) & 0xFF] ^ kTables[2][(crc_a >> 16) & 0xFF] ^
         kTables[3][crc_a >> 24] ^ crc_b;
}

const Crc32cLaneConstants& Crc32cBlockLaneConstants() {
  static const Crc32cLaneConstants kConstants = [] {
    Crc32cLaneConstants k{};
    for (int s = 0; s < 5; ++s) {
      const Gf2Operator op = ZeroBytesOperator(size_t{128} << s);
      for (int i = 0; i < 32; ++i) k.shift[s][i] = op[i];
    }
    // Crc32c(0, x) = ~(register from ~0 over x) = map(~0) ^ register from 0 over x ^ ~0.
    k.finish = Apply(ZeroBytesOperator(kCrcBlockBytes), 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
    return k;
  }();
  return kConstants;
}

uint32_t Crc32cBlockByLanes(const void* block) {
  static_assert(kCrcBlockBytes == 32 * 128);
  static const std::array<std::array<uint32_t, 256>, 4> kSlices = [] {
    std::array<std::array<uint32_t, 256>, 4> t{};
    t[0] = kTable;
    for (int k = 1; k < 4; ++k) {
      for (int i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ kTable[t[k - 1][i] & 0xFF];
    }
    return t;
  }();
  const Crc32cLaneConstants& k = Crc32cBlockLaneConstants();
  const auto* bytes = static_cast<const uint8_t*>(block);
  uint32_t lane[32];
  for (int l = 0; l < 32; ++l) {
    uint32_t c = 0;
    for (int j = 0; j < 32; ++j) {
      uint32_t word;
      std::memcpy(&word, bytes + 128 * l + 4 * j, 4);
      c ^= word;
      c = kSlices[3][c & 0xFF] ^ kSlices[2][(c >> 8) & 0xFF] ^ kSlices[1][(c >> 16) & 0xFF] ^ kSlices[0][c >> 24];
    }
    lane[l] = c;
  }
  for (int s = 0; s < 5; ++s) {
    Gf2Operator op;
    std::copy(std::begin(k.shift[s]), std::end(k.shift[s]), op.begin());
    for (int l = 0; l < 32; l += 2 << s) lane[l] = Apply(op, lane[l]) ^ lane[l + (1 << s)];
  }
  return lane[0] ^ k.finish;
}

uint32_t Crc32cParallel(const void* data, size_t n, int threads) {
  return Crc32cSpans({CrcSpan{data, nullptr, n}}, threads);
}

uint32_t Crc32cSpans(const std::vector<CrcSpan>& spans, int threads, uint32_t crc) {
  size_t total = 0;
  for (const CrcSpan& s : spans) total += s.n;
  constexpr size_t kGrain = 1 << 16;  // below this a thread costs more than it saves
  std::vector<uint32_t> piece_crc(ParallelPieces(threads, total, kGrain), 0);
  std::vector<size_t> piece_len(piece_crc.size(), 0);
  ParallelFor(threads, total, kGrain, [&](int piece, size_t begin, size_t end) {
    uint32_t c = 0;
    size_t at = 0;  // where the current span starts in the whole
    for (const CrcSpan& s : spans) {
      if (at >= end) break;
      const size_t from = std::max(begin, at), to = std::min(end, at + s.n);
      if (from < to) {
        const auto* src = static_cast<const uint8_t*>(s.src) + (from - at);
        c = s.dst ? CopyWithCrc32c(static_cast<uint8_t*>(s.dst) + (from - at), src, to - from, c)
                  : Crc32c(c, src, to - from);
      }
      at += s.n;
    }
    piece_crc[piece] = c;
    piece_len[piece] = end - begin;
  });
  // Combining extends any CRC state, not only one that began at 0.
  for (size_t p = 0; p < piece_crc.size(); ++p) crc = Crc32cCombine(crc, piece_crc[p], piece_len[p]);
  return crc;
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ~Crc32cHardware<false>(crc, p, n, nullptr);
#endif
  return ~Crc32cTable(crc, p, n);
}

uint32_t CopyWithCrc32c(void* dst, const void* src, size_t n, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ~Crc32cHardware<true>(crc, p, n, static_cast<uint8_t*>(dst));
#endif
  // The table walks a byte at a time, far slower than memcpy: two passes cost nothing extra.
  std::memcpy(dst, src, n);
  return ~Crc32cTable(crc, p, n);
}

}  // namespace psformer
