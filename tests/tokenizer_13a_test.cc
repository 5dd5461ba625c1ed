// The 13a tokenizer and the UTF-8 check, against sacreBLEU's Tokenizer13a output on 300+ lines
// (tests/data/bleu/tokenizer) and hand-worked rules.
#include "worker/translate/tokenizer_13a.h"

#include <gtest/gtest.h>

#include "common/text_lines.h"
#include "common/utf8.h"

namespace psformer {
namespace {

const std::string kVectorDir = std::string(PSFORMER_SOURCE_DIR) + "/tests/data/bleu/tokenizer/";

TEST(Tokenizer13a, MatchesSacreBleuOnEveryVectorLine) {
  auto input = ReadUtf8Lines(kVectorDir + "input.txt", CarriageReturn::kKeep);
  auto expected = ReadUtf8Lines(kVectorDir + "expected.txt", CarriageReturn::kKeep);
  ASSERT_TRUE(input.ok()) << input.status().ToString();
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  ASSERT_EQ(input->size(), expected->size());
  ASSERT_GT(input->size(), 300u);
  for (size_t i = 0; i < input->size(); ++i) {
    EXPECT_EQ(Tokenize13a((*input)[i]), (*expected)[i]) << "line " << i + 1 << ": " << (*input)[i];
  }
}

TEST(Tokenizer13a, SplitsPunctuationButKeepsApostrophesAndInnerDashes) {
  EXPECT_EQ(Tokenize13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(Tokenize13a("It's a well-known (fact)."), "It's a well-known ( fact ) .");
  EXPECT_EQ(Tokenize13a("a@b/c_d"), "a @ b / c _ d");
}

TEST(Tokenizer13a, PeriodsAndCommasStayInsideNumbersOnly) {
  EXPECT_EQ(Tokenize13a("3,000.50 and 1.5"), "3,000.50 and 1.5");
  EXPECT_EQ(Tokenize13a("in 2019."), "in 2019 .");  // followed by a non-digit
  EXPECT_EQ(Tokenize13a("a.b"), "a . b");
  EXPECT_EQ(Tokenize13a(".5"), ". 5");  // the leading space precedes it
  EXPECT_EQ(Tokenize13a("5,a"), "5 , a");
}

TEST(Tokenizer13a, DashSplitsAfterADigitOnly) {
  EXPECT_EQ(Tokenize13a("10-20"), "10 - 20");
  EXPECT_EQ(Tokenize13a("x-20"), "x-20");
  EXPECT_EQ(Tokenize13a("-5"), "-5");
}

TEST(Tokenizer13a, UnescapesEntitiesOnceInOrderAndDropsSkipped) {
  EXPECT_EQ(Tokenize13a("Tom &amp; Jerry"), "Tom & Jerry");
  EXPECT_EQ(Tokenize13a("&quot;hi&quot;"), "\" hi \"");
  // &amp;lt; becomes &lt; after the &amp; pass, which the later &lt; pass then turns into <.
  EXPECT_EQ(Tokenize13a("&amp;lt;"), "<");
  EXPECT_EQ(Tokenize13a("a<skipped>b"), "ab");
}

TEST(Tokenizer13a, SplitsOnPythonWhitespaceButNotZeroWidthSpace) {
  const std::string nbsp = "\xC2\xA0", ideographic_space = "\xE3\x80\x80", zero_width_space = "\xE2\x80\x8B";
  EXPECT_EQ(Tokenize13a("a" + nbsp + "b" + ideographic_space + "c\t d\x1C" + "e  "), "a b c d e");
  EXPECT_EQ(Tokenize13a("a" + zero_width_space + "b"), "a" + zero_width_space + "b");
  EXPECT_EQ(Tokenize13a(""), "");
  EXPECT_EQ(Tokenize13a(" \t\r"), "");
}

TEST(Tokenizer13a, LeavesNonAsciiLettersAlone) {
  // This source file is UTF-8.
  EXPECT_EQ(Tokenize13a("¿Dónde está el niño?"), "¿Dónde está el niño ?");
}

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("ni\xC3\xB1o \xE2\x80\x94 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));  // up to U+10FFFF
}

TEST(Utf8, RejectsWhatPythonsStrictDecoderRejects) {
  size_t offset = 99;
  EXPECT_FALSE(IsValidUtf8("ab\xFF", &offset));
  EXPECT_EQ(offset, 2u);
  EXPECT_FALSE(IsValidUtf8("\xC3"));                         // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));                     // overlong "/"
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));                 // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));                 // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));             // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));                         // lone continuation byte
  EXPECT_FALSE(IsValidUtf8(std::string("\xE2\x82") + "a"));  // bad continuation
}

}  // namespace
}  // namespace psformer
