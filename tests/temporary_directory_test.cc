// TemporaryDirectory: written beside its target, renamed into place or removed, and the leftovers
// of a writer killed before it could remove its own are removed by the next writer.
#include "common/temporary_directory.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(TemporaryDirectory, IsRenamedIntoPlaceOrRemoved) {
  TempDir dir;
  {
    auto temp = TemporaryDirectory::CreateBeside(dir.File("out"));
    ASSERT_TRUE(temp.ok()) << temp.status().ToString();
    EXPECT_EQ(temp->path().parent_path(), dir.path());
    EXPECT_EQ(temp->path().filename(), ".out.tmp-" + std::to_string(getpid()));
    ASSERT_TRUE(temp->RenameTo(dir.File("out")).ok());
  }
  EXPECT_TRUE(fs::is_directory(dir.File("out")));
  {
    auto temp = TemporaryDirectory::CreateBeside(dir.File("other"));
    ASSERT_TRUE(temp.ok());
    std::ofstream(temp->path() / "half-written") << "x";
  }
  for (const auto& entry : fs::directory_iterator(dir.path())) EXPECT_EQ(entry.path().filename(), "out");
}

TEST(TemporaryDirectory, RemovesTheLeftoversOfKilledWritersOnly) {
  TempDir dir;
  const std::string dead = ".out.tmp-" + std::to_string(testing::EndedProcess());
  const std::string alive = ".out.tmp-" + std::to_string(getppid());  // a running process's
  const std::string other_target = ".outer.tmp-" + std::to_string(testing::EndedProcess());
  const std::string not_a_pid = ".out.tmp-12ab";
  for (const std::string& name : {dead, alive, other_target, not_a_pid}) {
    fs::create_directory(dir.path() / name);
    std::ofstream(dir.path() / name / "shard") << "half";
  }
  std::ofstream(dir.path() / ".out.tmp-1") << "a file, not a directory";
  auto temp = TemporaryDirectory::CreateBeside(dir.File("out"));
  ASSERT_TRUE(temp.ok()) << temp.status().ToString();
  EXPECT_FALSE(fs::exists(dir.path() / dead)) << "a killed writer's directory is left";
  EXPECT_TRUE(fs::exists(dir.path() / alive / "shard")) << "a running writer's directory was removed";
  EXPECT_TRUE(fs::exists(dir.path() / other_target / "shard")) << "another target's directory was removed";
  EXPECT_TRUE(fs::exists(dir.path() / not_a_pid / "shard"));
  EXPECT_TRUE(fs::exists(dir.path() / ".out.tmp-1"));
  EXPECT_TRUE(fs::is_directory(temp->path()));
}

// Two writers of the same target at once: the second to finish leaves the first's result and
// says so (the system said "Directory not empty").
TEST(TemporaryDirectory, ASecondWriterOfTheSameTargetLeavesTheFirstsResult) {
  TempDir dir;
  auto first = TemporaryDirectory::CreateBeside(dir.File("out"));
  ASSERT_TRUE(first.ok());
  fs::create_directory(dir.File("out"));
  std::ofstream(dir.File("out/theirs")) << "x";
  std::ofstream(first->path() / "mine") << "y";
  const Status renamed = first->RenameTo(dir.File("out"));
  ASSERT_FALSE(renamed.ok());
  EXPECT_EQ(renamed.message(), dir.File("out") +
                                   " was written by another process meanwhile; it is left as that process wrote it, "
                                   "and this result is dropped");
  EXPECT_TRUE(fs::exists(dir.File("out/theirs")));
  EXPECT_FALSE(fs::exists(dir.File("out/mine")));
}

// The directories made for a target's missing parents go with a temporary directory that is
// removed (a failed or stopped writer), unless another writer's files are in them; a rename
// into place keeps them. A failed prepare of --out a/b/out left an empty a/b behind.
TEST(TemporaryDirectory, TheParentsItMadeGoWithItUnlessInUse) {
  TempDir dir;
  {
    auto temp = TemporaryDirectory::CreateBeside(dir.File("a/b/out"));
    ASSERT_TRUE(temp.ok()) << temp.status().ToString();
    std::ofstream(temp->path() / "half-written") << "x";
  }
  EXPECT_FALSE(fs::exists(dir.File("a"))) << "the directories it made are left";
  {
    auto temp = TemporaryDirectory::CreateBeside(dir.File("a/b/out"));
    ASSERT_TRUE(temp.ok());
    std::ofstream(dir.File("a/theirs")) << "another writer's";
  }
  EXPECT_FALSE(fs::exists(dir.File("a/b")));
  EXPECT_TRUE(fs::exists(dir.File("a/theirs")));
  {
    auto temp = TemporaryDirectory::CreateBeside(dir.File("c/d/out"));
    ASSERT_TRUE(temp.ok());
    ASSERT_TRUE(temp->RenameTo(dir.File("c/d/out")).ok());
  }
  EXPECT_TRUE(fs::is_directory(dir.File("c/d/out")));
}

// A file where one of the target's directories should be is named, not reported as the
// system's "Not a directory" about the path as a whole.
TEST(TemporaryDirectory, AFileInTheWayOfTheTargetsDirectoriesIsNamed) {
  TempDir dir;
  const std::string file = dir.Write("notes.txt", "x");
  for (const std::string& target : {file + "/out", file + "/deeper/out"}) {
    auto temp = TemporaryDirectory::CreateBeside(target);
    ASSERT_FALSE(temp.ok()) << target;
    EXPECT_NE(temp.status().message().find(file + " is a file, not a directory"), std::string::npos)
        << temp.status().message();
  }
  EXPECT_EQ(testing::ReadTextFile(file), "x");
}

}  // namespace
}  // namespace psformer
