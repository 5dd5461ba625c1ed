// The metrics.jsonl reader: what MetricsLine writes reads back; anything else is refused with its
// column; lines of any length cost linear time and bounded memory (LineReader).
#include "common/metrics_parser.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/line_reader.h"
#include "common/metrics_log.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

TEST(MetricsParser, ReadsWhatMetricsLineWrites) {
  MetricsLine line;
  line.Add("step", 120).Add("loss", 2.5).Add("lr", 7e-4).Add("note", "a \"quoted\"\n\\ word").Add("nan", NAN);
  auto parsed = ParseMetricsLine(line.ToJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << line.ToJson();
  EXPECT_EQ(parsed->numbers.at("step"), 120);
  EXPECT_EQ(parsed->numbers.at("loss"), 2.5);
  EXPECT_EQ(parsed->numbers.at("lr"), 7e-4);
  EXPECT_EQ(parsed->numbers.count("note"), 0u);
  EXPECT_EQ(parsed->numbers.count("nan"), 0u);  // written as null
  EXPECT_EQ(parsed->keys, (std::vector<std::string>{"step", "loss", "lr", "note", "nan"}));
  EXPECT_EQ(StepOf(parsed->numbers), 120);
}

TEST(MetricsParser, RefusesWhatIsNoMetricsLineNamingTheColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "column 1: expected a JSON object ({)"},
      {"{\"step\": 1", "column 11: the line ends inside the object"},
      {"{\"step\" 1}", "column 9: expected : after the key"},
      {"{\"a\": [1]}", "column 7: a nested object or array: metrics lines are flat"},
      {"{\"a\": 1e999}", "column 12: a number beyond double's range"},
      {"{\"a\": -}", "column 8: expected a number, a string, true, false or null"},
      {"{\"a\": \"x}", "the line ends inside a string"},
      {"{\"a\": \"\\q\"}", "unknown escape \\q"},
      {"{\"a\": 1} x", "column 10: text after the object's closing }"},
  };
  for (const auto& [line, problem] : cases) {
    auto parsed = ParseMetricsLine(line);
    ASSERT_FALSE(parsed.ok()) << line;
    EXPECT_NE(parsed.status().message().find(problem), std::string::npos) << line << "\n" << parsed.status().message();
  }
}

TEST(MetricsParser, StepsNoRunLogsAreNoSteps) {
  EXPECT_FALSE(StepOf({{"step", -1}}).has_value());
  EXPECT_FALSE(StepOf({{"step", 2.5}}).has_value());
  EXPECT_FALSE(StepOf({{"step", 1e300}}).has_value());
  EXPECT_FALSE(StepOf({{"step", NAN}}).has_value());
  EXPECT_FALSE(StepOf({{"loss", 1}}).has_value());
  EXPECT_EQ(StepOf({{"step", 0}}), 0);
}

TEST(MetricsParser, ALongLineIsReadInOnePass) {
  // ~30 KB lines once overflowed the stack of the regex reader; a megabyte is as easy.
  const std::string key(1 << 20, 'k');
  auto parsed = ParseMetricsLine("{\"step\": 5, \"" + key + "\": 1, \"s\": \"" + std::string(1 << 20, '[') + "\"}");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->numbers.at(key), 1);
  auto unclosed = ParseMetricsLine("{\"s\": \"" + std::string(1 << 20, '{'));
  EXPECT_FALSE(unclosed.ok());
}

TEST(LineReader, SkipsAndNamesLinesOverItsLimit) {
  testing::TempDir dir;
  const std::string path = dir.Write("m.jsonl", "short\n" + std::string(100, 'x') + "\nlast");
  LineReader reader(path, 10);
  std::string line;
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, "short");
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, "last");
  EXPECT_EQ(reader.number(), 3);
  EXPECT_FALSE(reader.Next(&line));
  ASSERT_EQ(reader.too_long().size(), 1u);
  EXPECT_EQ(reader.too_long()[0], path + ":2: the line is longer than 10 bytes; skipped");
  EXPECT_TRUE(reader.status().ok());
}

TEST(ReadMetricsFile, NamesTheFileAndLineOfWhatItCannotRead) {
  testing::TempDir dir;
  const std::string path =
      dir.Write("metrics.jsonl", "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\n{\"step\": 3}\n");
  auto strict = ReadMetricsFile(path);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(), path + ":2: column 18: the line ends inside a string (no closing \")");
  std::vector<std::string> problems;
  auto lenient = ReadMetricsFile(path, &problems);
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient->size(), 2u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(":2: column 18"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace psformer
