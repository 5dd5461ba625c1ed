// UTF-8 checking and reading texts of one sentence per line, against hand-made byte sequences.
#include "common/text_lines.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

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
  auto lines = ReadUtf8Lines(path, CarriageReturn::kDrop);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(*lines, (std::vector<std::string>{"one", "", "two", "three"}));
  auto empty = ReadUtf8Lines(dir.Write("e.txt", ""), CarriageReturn::kDrop);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto bad = ReadUtf8Lines(dir.Write("b.txt", "fine\nfine\nbad \xC3\n"), CarriageReturn::kDrop);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), dir.File("b.txt") + ":3: invalid UTF-8 at byte 5 of the line");
}

TEST(ReadUtf8Lines, KeepsCarriageReturnsWhenAskedAsSacrebleuDoes) {
  testing::TempDir dir;
  auto lines = ReadUtf8Lines(dir.Write("t.txt", "one\r\n\r\ntwo\n\n"), CarriageReturn::kKeep);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(*lines, (std::vector<std::string>{"one\r", "\r", "two", ""}));
}

// A corpus saved by Notepad begins with a byte order mark; read for a corpus, it is not part of
// the first sentence (nor of any later line); read as sacreBLEU does, it is kept, as Python's
// open(encoding="utf-8") keeps it.
TEST(ReadUtf8Lines, DropsAByteOrderMarkBeginningACorpusOnly) {
  testing::TempDir dir;
  const std::string path = dir.Write("bom.txt", "\xEF\xBB\xBFone\r\n\xEF\xBB\xBFtwo\r\n");
  auto corpus = ReadUtf8Lines(path, CarriageReturn::kDrop);
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  EXPECT_EQ(*corpus, (std::vector<std::string>{"one", "\xEF\xBB\xBFtwo"}));
  auto scored = ReadUtf8Lines(path, CarriageReturn::kKeep);
  ASSERT_TRUE(scored.ok());
  EXPECT_EQ(scored->front(), "\xEF\xBB\xBFone\r");
}

// A line is read in 64 KiB pieces: one that spans several, and a newline at a piece's edge.
TEST(ReadUtf8Lines, LinesAcrossReadBuffersComeWhole) {
  testing::TempDir dir;
  const std::string long_line(200000, 'a'), edge(65535, 'b');
  auto lines = ReadUtf8Lines(dir.Write("t.txt", long_line + "\n" + edge + "\nc\n"), CarriageReturn::kDrop);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(*lines, (std::vector<std::string>{long_line, edge, "c"}));
}

// /dev/zero or a binary file without a newline fails at the bound instead of filling memory.
TEST(ReadUtf8Lines, ALineOverTheBoundFailsNamingItsFileAndLine) {
  testing::TempDir dir;
  const std::string path = dir.Write("t.txt", "fine\n" + std::string(kMaxTextLineBytes + 1, 'x'));
  auto lines = ReadUtf8Lines(path, CarriageReturn::kKeep);
  ASSERT_FALSE(lines.ok());
  EXPECT_EQ(lines.status().message(),
            path + ":2: a line longer than 16 MiB (a text of one sentence per line has none)");
  auto at_bound = ReadUtf8Lines(dir.Write("b.txt", std::string(kMaxTextLineBytes, 'x')), CarriageReturn::kKeep);
  ASSERT_TRUE(at_bound.ok()) << at_bound.status().ToString();
  EXPECT_EQ(at_bound->size(), 1u);

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> zeros(std::fopen("/dev/zero", "rb"), &std::fclose);
  ASSERT_NE(zeros, nullptr);
  auto endless = ReadUtf8Lines(zeros.get(), "/dev/zero", CarriageReturn::kKeep);
  ASSERT_FALSE(endless.ok());
  EXPECT_EQ(endless.status().message(),
            "/dev/zero:1: a line longer than 16 MiB (a text of one sentence per line has none)");
}

TEST(ReadUtf8Lines, AMissingFileOrADirectoryIsNamed) {
  testing::TempDir dir;
  auto missing = ReadUtf8Lines(dir.File("none.txt"), CarriageReturn::kKeep);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "cannot read " + dir.File("none.txt") + ": No such file or directory");
  auto directory = ReadUtf8Lines(dir.path().string(), CarriageReturn::kKeep);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(), "cannot read " + dir.path().string() + ": it is a directory, not a file");
}

}  // namespace
}  // namespace psformer
