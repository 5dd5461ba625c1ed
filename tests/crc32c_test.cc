#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace psformer
