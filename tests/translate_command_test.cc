// `psformer translate` end to end through the binary: a SentencePiece model learnt here, a random
// model file of its vocabulary, and every bad input named with a non-zero exit and no output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/model_file.h"
#include "common/param_layout.h"
#include "tests/decode_test_util.h"
#include "tests/test_util.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {
namespace {

class TranslateCommandTest : public testing::SmallModelFilesTest {
 protected:
  void SetUp() override {
    SmallModelFilesTest::SetUp();
    if (HasFatalFailure()) return;
    auto vocabulary = SubwordVocabulary::FromFile(spm_);
    ASSERT_TRUE(vocabulary.ok());
    model_ = WriteRandomModel("model.bin", vocabulary->size());
    input_ =
        dir_.Write("input.txt", "the word was light\n\nin the beginning was the word and the word was day\nnight\n");
  }

  // Runs translate with `flags`, stdin from `input`; stdout goes to out.txt, stderr is returned.
  testing::CommandResult Translate(const std::string& flags, const std::string& input) {
    // The braces send only stdout to the file; RunShell captures stderr.
    return testing::RunShell(std::string("{ ") + PSFORMER_BINARY + " translate " + flags + " < " + input + " > " +
                             dir_.File("out.txt") + "; }");
  }
  std::vector<std::string> OutputLines() {
    std::ifstream in(dir_.File("out.txt"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::string model_, input_;
};

TEST_F(TranslateCommandTest, OneLinePerInputLineInOrder) {
  auto batched = Translate("--model " + model_ + " --spm " + spm_ + " --beam 3 --max-len-b 5 --batch-tokens 8", input_);
  ASSERT_EQ(batched.exit_status, 0) << batched.output;
  const std::vector<std::string> lines = OutputLines();
  ASSERT_EQ(lines.size(), 4u);
  // One line at a time (input order, no batching across lines) gives the same lines.
  std::ifstream in(input_);
  int i = 0;
  for (std::string line; std::getline(in, line); ++i) {
    const std::string single = dir_.Write("single.txt", line + "\n");
    auto alone = Translate("--model " + model_ + " --spm " + spm_ + " --beam 3 --max-len-b 5", single);
    ASSERT_EQ(alone.exit_status, 0) << alone.output;
    ASSERT_EQ(OutputLines().size(), 1u);
    EXPECT_EQ(OutputLines()[0], lines[i]) << "line " << i;
  }
}

TEST_F(TranslateCommandTest, BadInputsAreNamedAndLeaveNoOutput) {
  const std::string garbage = dir_.Write("garbage.bin", "PSFMODEL but not really a model file");
  const std::string other_vocab = WriteRandomModel("other.bin", 50);
  // Trained with another corpus's SentencePiece model of the same size.
  const std::string other_spm = WriteRandomModel("foreign.bin", 40, false, SentencePieceDigest("another spm.model"));
  struct Case {
    std::string flags;
    std::string expected;  // in the error message
    int exit_status;
  };
  const std::vector<Case> cases = {
      {"--model " + dir_.File("missing.bin") + " --spm " + spm_, "missing.bin", 1},
      {"--model " + garbage + " --spm " + spm_, "garbage.bin", 1},
      {"--model " + model_ + " --spm " + dir_.File("missing.model"), "missing.model", 1},
      {"--model " + model_ + " --spm " + garbage, "garbage.bin", 1},
      {"--model " + other_vocab + " --spm " + spm_, "vocabulary mismatch", 1},
      {"--model " + other_spm + " --spm " + spm_, "SentencePiece model mismatch: " + spm_, 1},
      {"--model " + model_ + " --spm " + dir_.File(""), "it is a directory, not a file", 1},
      {"--model " + model_ + " --spm " + spm_ + " --beam 0", "beam", 2},
      {"--model " + model_ + " --spm " + spm_ + " --alpha -1", "alpha", 2},
      {"--model " + model_ + " --spm " + spm_ + " --batch-tokens 0", "batch-tokens", 2},
      {"--model " + model_ + " --spm " + spm_ + " --max-len-a 0 --max-len-b 0", "every translation would be empty", 2},
      {"--model " + model_ + " --spm " + spm_ + " --beam four", "beam", 2},
      {"--model " + model_ + " --spm " + spm_ + " stray", "unexpected argument 'stray'", 2},
      {"--spm " + spm_, "model", 2},
      {"--model " + model_ + " --spm " + spm_ + " --gpu -2", "--gpu", 2},
      // Far more threads than cores would exhaust the machine for every process on it.
      {"--model " + model_ + " --spm " + spm_ + " --threads 100000", "--threads 100000 is far more threads than the",
       2},
#ifndef PSFORMER_HAVE_CUDA
      {"--model " + model_ + " --spm " + spm_ + " --gpu 0", "built without the CUDA backend", 1},
#endif
  };
  for (const Case& c : cases) {
    auto result = Translate(c.flags, input_);
    EXPECT_EQ(result.exit_status, c.exit_status) << c.flags << "\n" << result.output;
    EXPECT_NE(result.output.find("psformer translate: error:"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << c.flags << "\n" << result.output;
    EXPECT_EQ(result.output.find("terminate"), std::string::npos) << result.output;
    EXPECT_TRUE(OutputLines().empty()) << c.flags;
  }
}

// A run's model.bin asked for before the run has ended (translate or export of a run still
// training): the error says the run writes it at its end, and how to get a model now.
TEST_F(TranslateCommandTest, ARunsModelNotYetWrittenIsExplained) {
  std::filesystem::create_directories(dir_.File("run/checkpoints"));
  dir_.Write("run/config.pbtxt", "name: \"t\"\n");
  const std::string run = dir_.File("run");
  auto result = Translate("--model " + run + "/model.bin --spm " + spm_, input_);
  EXPECT_TRUE(testing::EndsSaying(result, 1,
                                  "cannot open model file " + run +
                                      "/model.bin: No such file or directory; the run in " + run +
                                      " writes it when its training ends (`psformer status " + run +
                                      "` says where it stands); for a model of its newest checkpoints now: psformer "
                                      "average --run-dir " +
                                      run + " --output FILE"));
  // Not a run: the plain error.
  result = Translate("--model " + dir_.File("model-elsewhere/model.bin") + " --spm " + spm_, input_);
  EXPECT_TRUE(testing::EndsSaying(result, 1, "/model-elsewhere/model.bin: No such file or directory"));
}

// A model file of an older psformer records no SentencePiece model: it still translates, and
// says once that --spm could not be checked against it.
TEST_F(TranslateCommandTest, AModelWithoutASentencePieceDigestTranslatesWithOneWarning) {
  const std::string old = WriteRandomModel("old.bin", 40, false, "");
  auto result = Translate("--model " + old + " --spm " + spm_ + " --beam 2 --max-len-b 3", input_);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_EQ(OutputLines().size(), 4u);
  const std::string warning = "psformer translate: warning: " + old + " records no SentencePiece model";
  const size_t at = result.output.find(warning);
  ASSERT_NE(at, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find(warning, at + 1), std::string::npos) << result.output;
  // A model that records its own passes without a word of it.
  auto checked = Translate("--model " + model_ + " --spm " + spm_ + " --beam 2 --max-len-b 3", input_);
  ASSERT_EQ(checked.exit_status, 0) << checked.output;
  EXPECT_EQ(checked.output.find("SentencePiece"), std::string::npos) << checked.output;
}

// A line that is not UTF-8 is refused with its line and byte, as prepare and bleu refuse it,
// instead of being translated as unknown pieces.
// Output into the very file the input is read from (`1<> FILE`, which does not truncate it) would
// write translations over the sentences still to be read: refused, the file as it was.
TEST_F(TranslateCommandTest, OutputIntoItsOwnInputFileIsRefused) {
  const std::string text = testing::ReadTextFile(input_);
  const std::string same = dir_.Write("same.txt", text);
  // The braces send only stdout to the file; RunShell captures stderr.
  const auto result = testing::RunShell(std::string("{ ") + PSFORMER_BINARY + " translate --model " + model_ +
                                        " --spm " + spm_ + " < " + same + " 1<> " + same + "; }");
  EXPECT_TRUE(testing::EndsSaying(result, 1, "standard output is the file standard input reads")) << result.output;
  EXPECT_EQ(testing::ReadTextFile(same), text);
}

TEST_F(TranslateCommandTest, InvalidUtf8OnStandardInputIsRefusedWithItsLine) {
  const std::string bad = dir_.Write("bad.txt", "the word\nwas \xff light\n");
  auto result = Translate("--model " + model_ + " --spm " + spm_, bad);
  EXPECT_TRUE(testing::EndsSaying(result, 1, "standard input:2: invalid UTF-8 at byte 5 of the line")) << result.output;
  EXPECT_TRUE(OutputLines().empty());
}

// /dev/zero (or a binary file without a newline) on standard input fails at the bound on a
// line's length, instead of filling memory until the allocator throws.
TEST_F(TranslateCommandTest, AnEndlessLineOnStandardInputIsRefusedWithItsLine) {
  auto result = Translate("--model " + model_ + " --spm " + spm_, "/dev/zero");
  EXPECT_TRUE(testing::EndsSaying(result, 1, "standard input:1: a line longer than 16 MiB")) << result.output;
  EXPECT_TRUE(OutputLines().empty());
}

// A line longer than the model's positions is cut and translated; the warning says how many were
// cut and which, the first five by number.
TEST_F(TranslateCommandTest, LinesCutToTheModelsPositionsAreNamed) {
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += "the word ";
  std::string text = "night\n";
  for (int line = 2; line <= 9; ++line) text += (line == 4 ? std::string("day") : long_line) + "\n";
  const std::string input = dir_.Write("long.txt", text);
  auto result = Translate("--model " + model_ + " --spm " + spm_ + " --beam 1 --max-len-b 2", input);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_EQ(OutputLines().size(), 9u);
  EXPECT_NE(result.output.find("warning: 7 line(s) longer than 31 subword tokens were cut to that length "
                               "(line 2, 3, 5, 6, 7 and 2 more of standard input)"),
            std::string::npos)
      << result.output;
}

// Standard input that cannot be read (a directory, or closed) is an error, not an empty input
// translated into nothing with exit status 0.
TEST_F(TranslateCommandTest, UnreadableStandardInputIsAnError) {
  const std::string flags = "--model " + model_ + " --spm " + spm_;
  auto directory = Translate(flags, dir_.File(""));
  EXPECT_TRUE(testing::EndsSaying(directory, 1, "cannot read standard input: Is a directory")) << directory.output;
  auto closed = testing::RunShell(std::string("{ ") + PSFORMER_BINARY + " translate " + flags + " <&- > " +
                                  dir_.File("out.txt") + "; }");
  EXPECT_TRUE(testing::EndsSaying(closed, 1, "cannot read standard input: Bad file descriptor")) << closed.output;
  EXPECT_TRUE(OutputLines().empty());
  // An empty input is no error: nothing to translate.
  auto empty = Translate(flags, "/dev/null");
  EXPECT_EQ(empty.exit_status, 0) << empty.output;
}

// Without --spm, a model in a run directory translates with the spm.model of the corpus its
// config.pbtxt names (data.train_dir), said on stderr; where there is none to take, the error
// says why and asks for --spm, with no output.
TEST_F(TranslateCommandTest, WithoutSpmTheRunsCorpusGivesIt) {
  std::filesystem::create_directories(dir_.File("run"));
  std::filesystem::copy_file(model_, dir_.File("run/model.bin"));
  auto run_config = [&](const std::string& data) {
    std::ofstream(dir_.File("run/config.pbtxt")) << "name: \"t\"\ndata { " << data << " }\n";
  };
  run_config("task: CORPUS train_dir: \"" + dir_.path().string() + "\"");
  auto with = Translate("--model " + model_ + " --spm " + spm_ + " --beam 2 --max-len-b 4", input_);
  ASSERT_EQ(with.exit_status, 0) << with.output;
  const std::vector<std::string> expected = OutputLines();
  auto without = Translate("--model " + dir_.File("run/model.bin") + " --beam 2 --max-len-b 4", input_);
  ASSERT_EQ(without.exit_status, 0) << without.output;
  EXPECT_EQ(OutputLines(), expected);
  EXPECT_NE(without.output.find("psformer translate: --spm " + spm_ + " (the corpus of the model's run)"),
            std::string::npos)
      << without.output;

  const std::string give = "; give --spm SPM, the spm.model of the corpus the model was trained on";
  run_config("task: CORPUS train_dir: \"no-such-corpus\"");
  auto missing = Translate("--model " + dir_.File("run/model.bin"), input_);
  EXPECT_TRUE(testing::EndsSaying(missing, 1,
                                  "no --spm, and the run's SentencePiece model, no-such-corpus/spm.model "
                                  "(data.train_dir = \"no-such-corpus\" of " +
                                      dir_.File("run/config.pbtxt") +
                                      "), is not there (a relative train_dir is read from the current directory, "
                                      "as the job did)" +
                                      give))
      << missing.output;
  run_config("task: COPY");
  auto copy = Translate("--model " + dir_.File("run/model.bin"), input_);
  EXPECT_TRUE(testing::EndsSaying(copy, 1,
                                  "trains the copy task, which has no SentencePiece model (its models copy "
                                  "ids, not text)"))
      << copy.output;
  run_config("no_such_field: 1");
  auto broken = Translate("--model " + dir_.File("run/model.bin"), input_);
  EXPECT_EQ(broken.exit_status, 1) << broken.output;
  EXPECT_NE(broken.output.find("the run's config to take it from cannot be read: " + dir_.File("run/config.pbtxt")),
            std::string::npos)
      << broken.output;
  // An emptied config is damage, not a run of the copy task (every default).
  std::ofstream(dir_.File("run/config.pbtxt")) << "# emptied\n";
  auto emptied = Translate("--model " + dir_.File("run/model.bin"), input_);
  EXPECT_TRUE(testing::EndsSaying(emptied, 1,
                                  "the run's config to take it from cannot be read: " + dir_.File("run/config.pbtxt") +
                                      " sets nothing (it is empty or only comments)" +
                                      ": psformer train wrote the run's resolved config there, and it was emptied "
                                      "or replaced since" +
                                      give))
      << emptied.output;
  auto outside = Translate("--model " + model_, input_);  // dir_ has no config.pbtxt
  EXPECT_TRUE(testing::EndsSaying(
      outside, 1,
      "no --spm, and " + model_ + " is not in a run directory (no config.pbtxt beside it) to take it from" + give))
      << outside.output;
  // A model that cannot be read is named for that first, not for the --spm it lacks.
  auto directory = Translate("--model " + dir_.File("run"), input_);
  EXPECT_TRUE(testing::EndsSaying(directory, 1, "it is a directory, not a file")) << directory.output;
  EXPECT_EQ(directory.output.find("--spm"), std::string::npos) << directory.output;
  EXPECT_TRUE(OutputLines().empty());
}

TEST_F(TranslateCommandTest, ABeamTooWideForTheMachineIsRefusedAndAnUnusualOneWarned) {
  const std::string model = "--model " + model_ + " --spm " + spm_;
  // 2^31 - 1 hypotheses of this model need far more than any machine has: refused before any
  // buffer is made, saying what it would need.
  auto huge = Translate(model + " --beam 2147483647", input_);
  EXPECT_TRUE(testing::EndsSaying(huge, 1, "use a narrower beam (4 to 10 is usual)")) << huge.output;
  EXPECT_NE(huge.output.find("for a single sentence"), std::string::npos) << huge.output;
  EXPECT_TRUE(OutputLines().empty());
  auto wide = Translate(model + " --beam 65 --max-len-b 5", input_);
  ASSERT_EQ(wide.exit_status, 0) << wide.output;
  EXPECT_NE(wide.output.find("warning: --beam 65 is unusually wide"), std::string::npos) << wide.output;
  EXPECT_EQ(OutputLines().size(), 4u);
  auto usual = Translate(model + " --beam 4 --max-len-b 5", input_);
  ASSERT_EQ(usual.exit_status, 0) << usual.output;
  EXPECT_EQ(usual.output.find("warning"), std::string::npos) << usual.output;
}

}  // namespace
}  // namespace psformer
