#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace psformer
