// scripts/get-bible-corpus where its Debian packages are installed (it would install them
// otherwise, which a test must not do): six files, equal line counts, the promised sizes, no
// markup left.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/test_util.h"

namespace psformer {
namespace {

TEST(BibleCorpusScript, WritesAlignedSplitsWithoutMarkup) {
  const auto installed = testing::RunShell(
      "command -v diatheke && dpkg-query -W -f='${Status}\\n' sword-text-web sword-text-sparv | grep -c 'install ok "
      "installed'");
  if (installed.exit_status != 0 || installed.output.find("\n2\n") == std::string::npos) {
    GTEST_SKIP() << "diatheke, sword-text-web or sword-text-sparv not installed; run scripts/get-bible-corpus by hand "
                    "(it installs them)";
  }
  testing::TempDir dir;
  const auto r = testing::RunShell(std::string(PSFORMER_SOURCE_DIR) + "/scripts/get-bible-corpus " + dir.File("bible"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  int64_t total = 0;
  for (const char* split : {"train", "valid", "test"}) {
    int64_t counts[2] = {0, 0};
    for (int side = 0; side < 2; ++side) {
      std::ifstream in(dir.File(std::string("bible/") + split + (side == 0 ? ".en" : ".es")));
      ASSERT_TRUE(in) << split;
      for (std::string line; std::getline(in, line); ++counts[side]) {
        ASSERT_FALSE(line.empty()) << split << " line " << counts[side] + 1;
        ASSERT_EQ(line.find_first_of("<>"), std::string::npos) << split << ": " << line;
        ASSERT_EQ(line.find("\xC2\xB6"), std::string::npos) << split << ": " << line;  // pilcrow
      }
    }
    EXPECT_EQ(counts[0], counts[1]) << split;
    if (std::string(split) != "train") {
      EXPECT_GE(counts[0], 1000) << split;
    }
    total += counts[0];
  }
  EXPECT_GE(total, 29000);
  EXPECT_EQ(r.output.find("verses ("), std::string::npos) << "a progress meter in a pipe: " << r.output;
}

// The script's progress meter, with stand-ins for diatheke and dpkg-query on the PATH (so the
// test runs everywhere and installs nothing): drawn on a terminal, absent from a pipe.
TEST(BibleCorpusScript, ProgressOnATerminalOnly) {
  testing::TempDir dir;
  const std::filesystem::path bin = dir.path() / "bin";
  std::filesystem::create_directories(bin);
  // Two books of three chapters of five verses, the same words in both "languages".
  dir.Write("bin/diatheke", R"sh(#!/usr/bin/env bash
if [[ $4 == modulelist ]]; then
  printf 'Biblical Texts:\nWEB : World English Bible\nSpaRV1909 : Reina Valera 1909\n'
  exit 0
fi
for book in Genesis Exodus; do
  for chapter in 1 2 3; do
    for verse in 1 2 3 4 5; do echo "$book $chapter:$verse: words of $book $chapter $verse"; done
  done
done
echo "($2)"
)sh");
  dir.Write("bin/dpkg-query", "#!/bin/sh\necho 'install ok installed'\n");
  std::filesystem::permissions(bin / "diatheke", std::filesystem::perms::owner_all);
  std::filesystem::permissions(bin / "dpkg-query", std::filesystem::perms::owner_all);
  const std::string command =
      "PATH=" + bin.string() + ":$PATH " + std::string(PSFORMER_SOURCE_DIR) + "/scripts/get-bible-corpus ";

  const auto terminal = testing::RunShellInTerminal(command + dir.File("terminal"));
  ASSERT_EQ(terminal.exit_status, 0) << terminal.output;
  EXPECT_NE(terminal.output.find("\rget-bible-corpus: exporting the English Bible: "), std::string::npos)
      << terminal.output;
  EXPECT_NE(terminal.output.find("\rget-bible-corpus: exporting the Spanish Bible: "), std::string::npos)
      << terminal.output;
  EXPECT_NE(terminal.output.find("get-bible-corpus: 30 verse pairs"), std::string::npos) << terminal.output;

  const auto piped = testing::RunShell(command + dir.File("piped"));
  ASSERT_EQ(piped.exit_status, 0) << piped.output;
  EXPECT_NE(piped.output.find("get-bible-corpus: 30 verse pairs"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find("exporting"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\033'), std::string::npos) << piped.output;
  // The same corpus either way.
  for (const char* file : {"valid.en", "valid.es", "train.en"}) {
    std::ifstream a(dir.File(std::string("terminal/") + file)), b(dir.File(std::string("piped/") + file));
    ASSERT_TRUE(a && b) << file;
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}), std::string(std::istreambuf_iterator<char>(b), {}))
        << file;
  }
}

}  // namespace
}  // namespace psformer
