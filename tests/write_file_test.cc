// WriteFileAtomically: a regular file is replaced whole or not at all; nothing else is replaced.
#include "common/write_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::ReadTextFile;
using testing::TempDir;

bool IsCharacterDevice(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

// A file where a directory of the path should be is named, at any depth; otherwise the
// directories are made.
TEST(MakeDirectories, NamesAFileInTheWayAndMakesWhatIsMissing) {
  TempDir dir;
  const std::string file = dir.Write("notes.txt", "x");
  Status s = MakeDirectories(file + "/run/logs", "run directory");
  EXPECT_EQ(s.message(), "cannot create run directory " + file + "/run/logs: " + file + " is a file, not a directory");
  s = MakeDirectories(file, "run directory");
  EXPECT_EQ(s.message(), "cannot create run directory " + file + ": " + file + " is a file, not a directory");
  EXPECT_EQ(ReadTextFile(file), "x");
  ASSERT_TRUE(MakeDirectories(dir.File("a/b/c"), "").ok());
  EXPECT_TRUE(fs::is_directory(dir.File("a/b/c")));
  EXPECT_TRUE(MakeDirectories(dir.File("a/b/c"), "").ok()) << "an existing directory is no error";
}

TEST(WriteFile, ReplacesARegularFileAndLeavesNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir.Write("out.txt", "old contents, longer than the new");
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(ReadTextFile(path), "new");
  for (const auto& entry : fs::directory_iterator(dir.path())) EXPECT_EQ(entry.path().filename(), "out.txt");
}

TEST(WriteFile, AFullDeviceFailsWithTheCauseAndStaysADevice) {
  ASSERT_TRUE(IsCharacterDevice("/dev/full"));
  const Status written = WriteFileAtomically("/dev/full", std::string(1 << 16, 'x'));
  EXPECT_TRUE(written.IsIoError());
  EXPECT_EQ(written.message(), "cannot write /dev/full: No space left on device");
  EXPECT_TRUE(IsCharacterDevice("/dev/full"));
  EXPECT_TRUE(WriteFileAtomically("/dev/null", "bytes").ok());
  EXPECT_TRUE(IsCharacterDevice("/dev/null"));
}

TEST(WriteFile, ADirectoryIsRefusedAndAMissingFolderNamed) {
  TempDir dir;
  const Status directory = WriteFileAtomically(dir.path().string(), "x");
  EXPECT_NE(directory.message().find("it is a directory"), std::string::npos) << directory.message();
  const Status missing = WriteFileAtomically(dir.File("no/such/out.txt"), "x");
  EXPECT_EQ(missing.message(),
            "cannot write " + dir.File("no/such/out.txt") + ": its directory " + dir.File("no/such") + " does not exist");
  const std::string file = dir.Write("notes.txt", "x");
  const Status below_a_file = WriteFileAtomically(file + "/out.txt", "y");
  EXPECT_EQ(below_a_file.message(), "cannot write " + file + "/out.txt: " + file + " is a file, not a directory");
  EXPECT_EQ(ReadTextFile(file), "x");
}

TEST(WriteFile, ALinkIsFollowedAndKept) {
  TempDir dir;
  const std::string target = dir.Write("target.txt", "old");
  fs::create_symlink(target, dir.File("link.txt"));
  ASSERT_TRUE(WriteFileAtomically(dir.File("link.txt"), "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir.File("link.txt")));
  EXPECT_EQ(ReadTextFile(target), "new");
}

}  // namespace
}  // namespace psformer
