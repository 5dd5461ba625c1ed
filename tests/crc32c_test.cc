#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/block_crcs.h"

namespace psformer {
namespace {

TEST(Crc32c, MatchesPublishedCheckValues) {
  // The standard check value of CRC-32C over "123456789" (RFC 3720, B.4 lists others).
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(0, zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(0, ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, ExtendsAcrossPieces) {
  std::string text = "The quick brown fox jumps over the lazy dog, twice over and then some.";
  const uint32_t whole = Crc32c(0, text.data(), text.size());
  for (size_t split = 0; split <= text.size(); ++split) {
    EXPECT_EQ(Crc32c(Crc32c(0, text.data(), split), text.data() + split, text.size() - split), whole);
  }
}

TEST(Crc32c, CombinesPiecesChecksummedSeparately) {
  std::string text;
  for (int i = 0; i < 70000; ++i) text.push_back(static_cast<char>((i * 7919) >> 3));
  const uint32_t whole = Crc32c(0, text.data(), text.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{8}, size_t{4095}, size_t{65536}, text.size() - 3, text.size()}) {
    const uint32_t a = Crc32c(0, text.data(), split);
    const uint32_t b = Crc32c(0, text.data() + split, text.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, text.size() - split), whole) << "split at " << split;
  }
}

// Long second parts take the high bits of the length (the maps for 2^16 .. 2^22 zero bytes).
TEST(Crc32c, CombinesLongPieces) {
  std::vector<uint8_t> bytes((5 << 20) + 12345);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const uint32_t whole = Crc32c(0, bytes.data(), bytes.size());
  for (size_t split : {size_t{3}, size_t{100000}, size_t{1} << 20, bytes.size() / 2 + 7}) {
    const uint32_t a = Crc32c(0, bytes.data(), split);
    const uint32_t b = Crc32c(0, bytes.data() + split, bytes.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, bytes.size() - split), whole) << "split at " << split;
  }
}

// Bit by bit, straight from the definition: the reference for buffers long enough to take the
// three-chain path of the hardware implementation (12 KiB and more).
uint32_t Crc32cBitwise(const uint8_t* p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32c, LongBuffersMatchTheDefinitionAtAnyLengthAndAlignment) {
  std::vector<uint8_t> bytes(3 * 4096 * 3 + 1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 11);
  for (size_t offset : {size_t{0}, size_t{1}, size_t{7}}) {
    for (size_t n :
         {size_t{3 * 4096 - 1}, size_t{3 * 4096}, size_t{3 * 4096 + 5}, size_t{6 * 4096 + 8}, bytes.size() - 7}) {
      EXPECT_EQ(Crc32c(0, bytes.data() + offset, n), Crc32cBitwise(bytes.data() + offset, n))
          << "offset " << offset << ", " << n << " bytes";
    }
  }
}

TEST(Crc32c, CopyWithCrcEqualsMemcpyThenCrcAtOddSizesAndAlignments) {
  std::vector<uint8_t> src(3 * 4096 * 4 + 100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 2654435761u >> 9);
  for (size_t from : {size_t{0}, size_t{1}, size_t{3}, size_t{8}}) {
    for (size_t to : {size_t{0}, size_t{5}, size_t{64}}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, size_t{3 * 4096 - 1}, size_t{3 * 4096 + 13},
                       size_t{9 * 4096 + 3}, src.size() - 8}) {
        std::vector<uint8_t> expected(n + to + 3, 0xA5), copied(n + to + 3, 0xA5);
        std::memcpy(expected.data() + to, src.data() + from, n);
        const uint32_t crc = CopyWithCrc32c(copied.data() + to, src.data() + from, n, 0x1234u);
        EXPECT_EQ(crc, Crc32c(0x1234u, src.data() + from, n)) << from << " -> " << to << ", " << n << " bytes";
        // The bytes copied, and none around them touched.
        EXPECT_EQ(copied, expected) << from << " -> " << to << ", " << n << " bytes";
      }
    }
  }
}

TEST(Crc32c, ParallelEqualsSerialForAnyThreadCount) {
  std::vector<uint8_t> bytes(300001);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const uint32_t serial = Crc32c(0, bytes.data(), bytes.size());
  for (int threads : {1, 2, 3, 4, 7}) EXPECT_EQ(Crc32cParallel(bytes.data(), bytes.size(), threads), serial) << threads;
  EXPECT_EQ(Crc32cParallel(bytes.data(), 0, 4), 0u);
}

// Spans of odd sizes (an empty one among them), some copied and some only read, split across
// threads wherever the pieces fall: the CRC of the whole and the copies are as done in one pass.
TEST(Crc32c, SpansGiveTheCrcOfTheWholeAndTheirCopiesForAnyThreadCount) {
  const std::vector<size_t> sizes = {17, 0, 70001, 200003, 1, 65536, 3};
  std::vector<std::vector<uint8_t>> src;
  std::string whole;
  for (size_t k = 0; k < sizes.size(); ++k) {
    src.emplace_back(sizes[k]);
    for (size_t i = 0; i < sizes[k]; ++i) src[k][i] = static_cast<uint8_t>((i + 31 * k) * 2654435761u >> 11);
    whole.append(reinterpret_cast<const char*>(src[k].data()), sizes[k]);
  }
  const uint32_t expected = Crc32c(0x1234u, whole.data(), whole.size());
  for (int threads : {1, 2, 3, 4, 7}) {
    std::vector<std::vector<uint8_t>> dst;
    std::vector<CrcSpan> spans;
    for (size_t k = 0; k < sizes.size(); ++k) {
      dst.emplace_back(sizes[k] + 1, uint8_t{0xA5});  // one byte past the span stays as it was
      spans.push_back({src[k].data(), k % 2 == 0 ? dst[k].data() : nullptr, sizes[k]});
    }
    EXPECT_EQ(Crc32cSpans(spans, threads, 0x1234u), expected) << threads << " thread(s)";
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<uint8_t> want = k % 2 == 0 ? src[k] : std::vector<uint8_t>(sizes[k], 0xA5);
      want.push_back(0xA5);
      EXPECT_EQ(dst[k], want) << "span " << k << ", " << threads << " thread(s)";
    }
  }
  EXPECT_EQ(Crc32cSpans({}, 4, 0x1234u), 0x1234u);
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Each block's CRC as Crc32c computes it, in any count (three chains at a time, the rest one by
// one), and with dst the bytes copied too; appending a block's CRC is combining it.
TEST(BlockCrc32cs, EachBlocksCrcIsCrc32cOfItAndTheCopyIsExact) {
  const std::vector<uint8_t> src = RandomBytes(8 * kCrcBlockBytes, 7);
  for (size_t blocks = 0; blocks <= 8; ++blocks) {
    SCOPED_TRACE(blocks);
    std::vector<uint32_t> crcs(blocks + 1, 12345);
    std::vector<uint8_t> dst(src.size(), 0);
    BlockCrc32cs(src.data(), blocks, crcs.data(), dst.data());
    for (size_t i = 0; i < blocks; ++i) {
      EXPECT_EQ(crcs[i], Crc32c(0, src.data() + i * kCrcBlockBytes, kCrcBlockBytes)) << i;
    }
    EXPECT_EQ(crcs[blocks], 12345u) << "wrote past the blocks";
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + blocks * kCrcBlockBytes, dst.begin()));
    EXPECT_TRUE(std::all_of(dst.begin() + blocks * kCrcBlockBytes, dst.end(), [](uint8_t b) { return b == 0; }));
    std::vector<uint32_t> read_only(blocks + 1, 0);
    BlockCrc32cs(src.data(), blocks, read_only.data());
    for (size_t i = 0; i < blocks; ++i) EXPECT_EQ(read_only[i], crcs[i]);
  }
  for (uint32_t a : {0u, 1u, 0xDEADBEEFu, 0xFFFFFFFFu}) {
    EXPECT_EQ(Crc32cAppendBlock(a, 0x12345678u), Crc32cCombine(a, 0x12345678u, kCrcBlockBytes));
  }
}

// A stretch's CRC from the blocks recorded is Crc32c of its bytes, wherever it begins and ends
// and whichever of its blocks were recorded; it is unknown when none was, outside the array, or
// once the record is invalidated. It comes from the record, not the bytes: a wrong entry gives a
// wrong CRC.
TEST(BlockCrcs, AStretchsCrcComesFromTheRecordedBlocksAndReadsOnlyTheRest) {
  constexpr size_t kBlocks = 10;
  const std::vector<uint8_t> bytes = RandomBytes(kBlocks * kCrcBlockBytes + 1000, 11);
  std::vector<BlockCrcs::Entry> entries(BlockCrcs::Blocks(bytes.size()), BlockCrcs::Entry{0, 0});
  ASSERT_EQ(entries.size(), kBlocks);
  BlockCrcs record(bytes.data(), bytes.size(), entries.data());
  EXPECT_FALSE(record.Crc32cOf(bytes.data(), bytes.size())) << "nothing recorded yet";
  for (size_t b = 0; b < kBlocks; b += 2)
    record.Record(b, Crc32c(0, bytes.data() + b * kCrcBlockBytes, kCrcBlockBytes));
  std::mt19937 rng(3);
  int known = 0;
  for (int i = 0; i < 2000; ++i) {
    const size_t begin = rng() % bytes.size(), end = begin + rng() % (bytes.size() - begin + 1);
    const std::optional<uint32_t> crc = record.Crc32cOf(bytes.data() + begin, end - begin);
    const auto [first, last] = BlockCrcs::WholeBlocks(begin, end);
    bool any = false;
    for (size_t b = first; b < last; ++b) any = any || b % 2 == 0;
    ASSERT_EQ(crc.has_value(), any) << begin << ".." << end;
    if (crc) {
      ++known;
      ASSERT_EQ(*crc, Crc32c(0, bytes.data() + begin, end - begin)) << begin << ".." << end;
    }
  }
  EXPECT_GT(known, 500);  // most stretches hold a recorded block
  EXPECT_FALSE(record.Crc32cOf(bytes.data() + 10, bytes.size())) << "runs past the array";
  const uint8_t before[8] = {};
  EXPECT_FALSE(record.Crc32cOf(before, sizeof(before))) << "not in the array";
  entries[2].crc ^= 1;
  EXPECT_NE(*record.Crc32cOf(bytes.data(), bytes.size()), Crc32c(0, bytes.data(), bytes.size()));
  record.Invalidate();
  EXPECT_FALSE(record.Crc32cOf(bytes.data(), bytes.size())) << "stale after Invalidate";
  record.Record(4, Crc32c(0, bytes.data() + 4 * kCrcBlockBytes, kCrcBlockBytes));
  EXPECT_EQ(*record.Crc32cOf(bytes.data(), bytes.size()), Crc32c(0, bytes.data(), bytes.size()))
      << "only block 4 counts now: the wrong entry 2 is stale";
}

// WriteAndRecord writes a stretch in order, in non-empty writes that cover it exactly, and
// records each whole block's CRC of what was written; blocks the stretch holds only in part get none.
TEST(BlockCrcs, WriteAndRecordWritesTheStretchOnceAndRecordsItsWholeBlocks) {
  constexpr size_t kBlocks = 40;
  const std::vector<uint8_t> source = RandomBytes(kBlocks * kCrcBlockBytes + 333, 12);
  std::mt19937 rng(4);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> array(source.size(), 0);
    std::vector<BlockCrcs::Entry> entries(BlockCrcs::Blocks(array.size()), BlockCrcs::Entry{0, 0});
    BlockCrcs record(array.data(), array.size(), entries.data());
    const size_t begin = rng() % array.size(), end = begin + rng() % (array.size() - begin + 1);
    size_t at = begin;
    record.WriteAndRecord(begin, end, [&](size_t from, size_t to) {
      ASSERT_EQ(from, at);
      ASSERT_LT(from, to);
      std::memcpy(array.data() + from, source.data() + from, to - from);
      at = to;
    });
    ASSERT_EQ(at, end) << begin << ".." << end;
    ASSERT_TRUE(std::equal(array.begin() + begin, array.begin() + end, source.begin() + begin));
    const auto [first, last] = BlockCrcs::WholeBlocks(begin, end);
    for (size_t b = 0; b < entries.size(); ++b) {
      if (b >= first && b < last) {
        ASSERT_EQ(entries[b].stamp, record.stamp()) << b;
        ASSERT_EQ(entries[b].crc, Crc32c(0, source.data() + b * kCrcBlockBytes, kCrcBlockBytes)) << b;
      } else {
        ASSERT_EQ(entries[b].stamp, 0u) << b << " of " << begin << ".." << end;
      }
    }
  }
}

// The GPU's way to a block's CRC (lanes of 128 bytes joined in five rounds), run on the host:
// Crc32c of the block, for any bytes.
TEST(Crc32cBlockByLanes, IsCrc32cOfTheBlock) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::vector<uint8_t> block = RandomBytes(kCrcBlockBytes, seed);
    EXPECT_EQ(Crc32cBlockByLanes(block.data()), Crc32c(0, block.data(), block.size())) << seed;
  }
  const std::vector<uint8_t> zeros(kCrcBlockBytes, 0), ones(kCrcBlockBytes, 0xFF);
  EXPECT_EQ(Crc32cBlockByLanes(zeros.data()), Crc32c(0, zeros.data(), zeros.size()));
  EXPECT_EQ(Crc32cBlockByLanes(ones.data()), Crc32c(0, ones.data(), ones.size()));
}

}  // namespace
}  // namespace psformer
