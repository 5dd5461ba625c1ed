// UTF-8 checking and line reading for `psformer prepare`, against hand-made byte sequences.
#include "worker/data/text_lines.h"

#include <gtest/gtest.h>

#include "common/utf8.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

TEST(IsValidUtf8, AcceptsEveryEncodingLength) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("ni\xC3\xB1o"));  // U+00F1, 2 bytes
  EXPECT_TRUE(
      IsValidUtf8("\xE2\x80\x9C"
                  "x"
                  "\xE2\x80\x9D"));              // U+201C/D, 3 bytes
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));  // U+1F600, 4 bytes
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
}

TEST(IsValidUtf8, RejectsMalformedSequencesAndSaysWhere) {
  struct Case {
    const char* text;
    size_t bad_at;
  } cases[] = {
      {"ab\x80", 2},            // a continuation byte with no lead
      {"a\xC3", 1},             // truncated at the end
      {"a\xC3(", 1},            // lead byte then a non-continuation byte
      {"\xC0\xAF", 0},          // overlong "/"
      {"\xE0\x80\xAF", 0},      // overlong, 3 bytes
      {"x\xED\xA0\x80", 1},     // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", 0},  // U+110000, past Unicode
      {"ok\xFF", 2},            // never valid in UTF-8
  };
  for (const Case& c : cases) {
    size_t at = 999;
    EXPECT_FALSE(IsValidUtf8(c.text, &at)) << c.text;
    EXPECT_EQ(at, c.bad_at) << c.text;
  }
}

TEST(ReadUtf8Lines, SplitsLinesDropsCarriageReturnsAndKeepsALastLineWithoutNewline) {
  testing::TempDir dir;
  const std::string path = dir.Write("t.txt", "one\r\n\ntwo\nthree");
  auto lines = ReadUtf8Lines(path);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(*lines, (std::vector<std::string>{"one", "", "two", "three"}));
  auto empty = ReadUtf8Lines(dir.Write("e.txt", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto bad = ReadUtf8Lines(dir.Write("b.txt", "fine\nfine\nbad \xC3\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), dir.File("b.txt") + ":3: invalid UTF-8 at byte 5 of the line");
}

}  // namespace
}  // namespace psformer
