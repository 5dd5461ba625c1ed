// scripts/get-bible-corpus where its Debian packages are installed (it would install them
// otherwise, which a test must not do): six files, equal line counts, the promised sizes, no
// markup left.
#include <gtest/gtest.h>

#include <fstream>
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
}

}  // namespace
}  // namespace psformer
