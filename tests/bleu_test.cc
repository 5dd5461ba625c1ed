// Corpus BLEU against scores computed once with sacreBLEU 2.6.0 (tests/data/bleu/<case>/, made by
// tests/reference/make_bleu_vectors.py), hand-worked statistics, and the `psformer bleu` command:
// its printed line and its errors.
#include "worker/translate/bleu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/text_lines.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::EndsSaying;
using testing::RunPsformer;
using testing::TempDir;

const fs::path kVectorDir = fs::path(PSFORMER_SOURCE_DIR) / "tests/data/bleu";

struct BleuVector {
  std::string name;
  fs::path hyp;
  std::vector<fs::path> refs;  // ref.1.txt, ref.2.txt, ... in order
  double score = 0;            // sacreBLEU's score, full precision
  std::string line;            // sacreBLEU's printed line
};

std::vector<BleuVector> LoadVectors() {
  std::vector<BleuVector> vectors;
  for (const auto& entry : fs::directory_iterator(kVectorDir)) {
    if (!entry.is_directory() || entry.path().filename() == "tokenizer") continue;
    BleuVector v;
    v.name = entry.path().filename().string();
    v.hyp = entry.path() / "hyp.txt";
    for (int k = 1; fs::exists(entry.path() / ("ref." + std::to_string(k) + ".txt")); ++k) {
      v.refs.push_back(entry.path() / ("ref." + std::to_string(k) + ".txt"));
    }
    std::ifstream expected(entry.path() / "expected.txt");
    std::string score_text;
    std::getline(expected, score_text);
    std::getline(expected, v.line);
    v.score = std::strtod(score_text.c_str(), nullptr);
    vectors.push_back(std::move(v));
  }
  std::sort(vectors.begin(), vectors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return vectors;
}

TEST(CorpusBleu, MatchesSacreBleuOnEveryVector) {
  const auto vectors = LoadVectors();
  ASSERT_GE(vectors.size(), 18u) << "test vectors missing under " << kVectorDir;
  for (const BleuVector& v : vectors) {
    SCOPED_TRACE(v.name);
    ASSERT_FALSE(v.refs.empty());
    ASSERT_EQ(v.line.rfind("BLEU = ", 0), 0u);
    auto hyps = ReadUtf8Lines(v.hyp, CarriageReturn::kKeep);
    ASSERT_TRUE(hyps.ok()) << hyps.status().ToString();
    std::vector<std::vector<std::string>> refs;
    for (const fs::path& path : v.refs) {
      auto lines = ReadUtf8Lines(path, CarriageReturn::kKeep);
      ASSERT_TRUE(lines.ok()) << lines.status().ToString();
      refs.push_back(*lines);
    }
    auto score = CorpusBleu(*hyps, refs);
    ASSERT_TRUE(score.ok()) << score.status().ToString();
    EXPECT_NEAR(score->score, v.score, 0.005);
    EXPECT_EQ(FormatBleuLine(*score), v.line);
  }
}

TEST(BleuCommand, PrintsSacreBleusLineForEveryVector) {
  const auto vectors = LoadVectors();
  ASSERT_GE(vectors.size(), 18u);
  for (const BleuVector& v : vectors) {
    SCOPED_TRACE(v.name);
    std::string arguments = "bleu --hyp '" + v.hyp.string() + "'";
    for (const fs::path& ref : v.refs) arguments += " --ref '" + ref.string() + "'";
    const auto result = RunPsformer(arguments);
    EXPECT_EQ(result.exit_status, 0) << result.output;
    EXPECT_EQ(result.output, v.line + "\n");
  }
}

// A worked example, independent of sacreBLEU: hyp "the cat sat on the mat" (6 tokens) against
// "the cat is on the mat" and "there is a cat on the mat". Clipped matches per order:
// 1-grams: "the" twice (reference 1 has two), "cat", "on", "mat"; not "sat" -> 5 of 6;
// 2-grams: "the cat", "on the", "the mat" -> 3 of 5; 3-grams: "on the mat" -> 1 of 4;
// 4-grams: none of 3. Closest reference length: 6 (reference 1), so BP = 1.
TEST(CorpusBleu, WorkedExampleByHand) {
  const BleuStats stats =
      SegmentBleuStats("the cat sat on the mat", {"the cat is on the mat", "there is a cat on the mat"});
  EXPECT_EQ(stats.hyp_len, 6);
  EXPECT_EQ(stats.ref_len, 6);
  EXPECT_EQ(stats.correct, (std::array<int64_t, 4>{5, 3, 1, 0}));
  EXPECT_EQ(stats.total, (std::array<int64_t, 4>{6, 5, 4, 3}));
  const BleuScore score = BleuFromStats(stats);
  // Smoothing "exp": the empty 4-gram order gets 100 / (2 * 3).
  const double p[4] = {500.0 / 6, 60.0, 25.0, 100.0 / 6};
  EXPECT_NEAR(score.score, std::exp((std::log(p[0]) + std::log(p[1]) + std::log(p[2]) + std::log(p[3])) / 4), 1e-9);
  EXPECT_NEAR(score.precisions[3], p[3], 1e-12);
  EXPECT_EQ(score.brevity_penalty, 1.0);
}

TEST(CorpusBleu, ClosestReferenceLengthPrefersTheShorterOnATie) {
  EXPECT_EQ(SegmentBleuStats("a b c", {"a b c d", "a b"}).ref_len, 2);
  EXPECT_EQ(SegmentBleuStats("a b c", {"a b", "a b c d"}).ref_len, 2);
  EXPECT_EQ(SegmentBleuStats("a b c", {"a", "a b c d e f", "x y z w"}).ref_len, 4);
}

TEST(CorpusBleu, BrevityPenaltyAndRatio) {
  // 4 tokens against 5, all n-grams match: BLEU = exp(1 - 5/4) * 100.
  auto score = CorpusBleu({"a b c d"}, {{"a b c d e"}});
  ASSERT_TRUE(score.ok());
  EXPECT_NEAR(score->score, 100 * std::exp(-0.25), 1e-9);
  EXPECT_NEAR(score->ratio, 0.8, 1e-12);
  EXPECT_EQ(FormatBleuLine(*score),
            "BLEU = 77.88 100.0/100.0/100.0/100.0 (BP = 0.779 ratio = 0.800 hyp_len = 4 ref_len = 5)");
}

TEST(CorpusBleu, EmptyHypothesesScoreZero) {
  auto score = CorpusBleu({"", ""}, {{"a b", "c"}});
  ASSERT_TRUE(score.ok());
  EXPECT_EQ(FormatBleuLine(*score), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 3)");
}

TEST(CorpusBleu, RejectsMisalignedStreamsAndBadUtf8) {
  EXPECT_FALSE(CorpusBleu({"a"}, {}).ok());
  auto misaligned = CorpusBleu({"a", "b"}, {{"a", "b"}, {"a"}});
  ASSERT_FALSE(misaligned.ok());
  EXPECT_NE(misaligned.status().message().find("reference stream 2 has 1 segments"), std::string::npos);
  auto bad = CorpusBleu({"a", "b\xFF"}, {{"a", "b"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hypothesis segment 2"), std::string::npos);
}

TEST(BleuCommand, ReportsMissingFileByName) {
  TempDir dir;
  const auto ref = dir.Write("ref.txt", "a b\n");
  const auto result = RunPsformer("bleu --hyp " + dir.File("nope.txt") + " --ref " + ref);
  EXPECT_TRUE(EndsSaying(result, 1, "psformer bleu: error: cannot read " + dir.File("nope.txt")));
  EXPECT_EQ(result.output.find("BLEU ="), std::string::npos);
  const auto directory = RunPsformer("bleu --hyp " + ref + " --ref " + dir.path().string());
  EXPECT_TRUE(EndsSaying(directory, 1, "cannot read " + dir.path().string()));
}

TEST(BleuCommand, ReportsDifferentLineCountsWithBothFiles) {
  TempDir dir;
  const auto hyp = dir.Write("hyp.txt", "a\nb\nc\n");
  const auto ref1 = dir.Write("ref1.txt", "a\nb\nc\n");
  const auto ref2 = dir.Write("ref2.txt", "a\nb");
  const auto result = RunPsformer("bleu --hyp " + hyp + " --ref " + ref1 + " --ref " + ref2);
  EXPECT_TRUE(EndsSaying(result, 1, hyp + " has 3 lines but " + ref2 + " has 2"));
  EXPECT_EQ(result.output.find("BLEU ="), std::string::npos);
}

TEST(BleuCommand, ReportsInvalidUtf8WithFileAndLine) {
  TempDir dir;
  const auto hyp = dir.Write("hyp.txt", "a\nb\n");
  const auto ref = dir.Write("ref.txt", "a\nni\xF1o\n");  // Latin-1, not UTF-8
  const auto result = RunPsformer("bleu --hyp " + hyp + " --ref " + ref);
  EXPECT_TRUE(EndsSaying(result, 1, ref + ":2: invalid UTF-8"));
}

TEST(BleuCommand, RequiresAReference) {
  TempDir dir;
  const auto hyp = dir.Write("hyp.txt", "a\n");
  const auto result = RunPsformer("bleu --hyp " + hyp);
  EXPECT_TRUE(EndsSaying(result, 2, "no reference given"));
  EXPECT_EQ(RunPsformer("bleu --ref " + hyp).exit_status, 2);
}

// "-" reads standard input, as translate's output comes through a pipe: the same score as from
// the file, its name in errors; only one file can be standard input.
TEST(BleuCommand, ReadsOneFileFromStandardInput) {
  const auto vectors = LoadVectors();
  ASSERT_FALSE(vectors.empty());
  const BleuVector& v = vectors.front();
  std::string refs;
  for (const fs::path& ref : v.refs) refs += " --ref '" + ref.string() + "'";
  auto piped = RunPsformer("bleu --hyp -" + refs + " < '" + v.hyp.string() + "'");
  EXPECT_EQ(piped.exit_status, 0) << piped.output;
  EXPECT_EQ(piped.output, v.line + "\n");
  if (v.refs.size() == 1) {
    piped = RunPsformer("bleu --hyp '" + v.hyp.string() + "' --ref - < '" + v.refs[0].string() + "'");
    EXPECT_EQ(piped.output, v.line + "\n");
  }
  TempDir dir;
  const auto hyp = dir.Write("hyp.txt", "a\nb\n");
  EXPECT_TRUE(EndsSaying(RunPsformer("bleu --hyp - --ref " + hyp + " < /dev/null"), 1,
                         "standard input (--hyp -) is empty: no hypotheses to score"));
  EXPECT_TRUE(
      EndsSaying(testing::RunShell("printf 'a\\n' | " + testing::PsformerBinary() + " bleu --hyp " + hyp + " --ref -"),
                 1, hyp + " has 2 lines but standard input (--ref -) has 1"));
  EXPECT_TRUE(EndsSaying(RunPsformer("bleu --hyp - --ref - < " + hyp), 2, "at most one of --hyp and the --ref files"));
}

TEST(BleuCommand, RejectsStrayArgumentsAndAnEmptyHypothesisFile) {
  TempDir dir;
  const auto hyp = dir.Write("hyp.txt", "a\n");
  const auto stray = RunPsformer("bleu --hyp " + hyp + " --ref " + hyp + " " + hyp);
  EXPECT_EQ(stray.exit_status, 2) << stray.output;
  EXPECT_EQ(stray.output.find("BLEU ="), std::string::npos);
  const auto empty = dir.Write("empty.txt", "");
  const auto result = RunPsformer("bleu --hyp " + empty + " --ref " + empty);
  EXPECT_TRUE(EndsSaying(result, 1, empty + " is empty"));
}

}  // namespace
}  // namespace psformer
