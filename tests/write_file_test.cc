// WriteFileAtomically: a regular file is replaced whole or not at all; nothing else is replaced.
#include "common/write_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
  EXPECT_EQ(missing.message(), "cannot write " + dir.File("no/such/out.txt") + ": its directory " +
                                   dir.File("no/such") + " does not exist");
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

// What a writer killed midway (kill -9: no handler runs) left beside its result goes with the
// next writer's sweep; a running writer's, another result's, and a directory stay. An average
// killed while writing a large model left "FILE.tmp.PID", hundreds of MB, for good.
TEST(WriteFile, TheLeftoversOfKilledWritersOnlyAreRemoved) {
  TempDir dir;
  const std::string dead = dir.Write("model.bin.tmp." + std::to_string(testing::EndedProcess()), "half");
  const std::string alive = dir.Write("model.bin.tmp." + std::to_string(getppid()), "being written");
  const std::string other = dir.Write("other.bin.tmp." + std::to_string(testing::EndedProcess()), "half");
  const std::string not_a_pid = dir.Write("model.bin.tmp.12ab", "x");
  const std::string folder = dir.File("model.bin.tmp." + std::to_string(testing::EndedProcess()));
  fs::create_directory(folder);
  fs::create_symlink(dir.Write("model.bin", "an earlier model"), dir.File("link.bin"));
  RemoveDeadWritersTemporaryFiles(dir.File("link.bin"));  // beside the link's target
  EXPECT_FALSE(fs::exists(dead)) << "a killed writer's file is left";
  EXPECT_TRUE(fs::exists(alive)) << "a running writer's file was removed";
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(not_a_pid));
  EXPECT_TRUE(fs::is_directory(folder));
}

}  // namespace
}  // namespace psformer
