// What the launch removes after it had to SIGKILL mpirun: that mpirun's session directory and
// nothing else (tests/cluster_test.cc's link test sees it happen for a real mpirun).
#include "launcher/mpirun_session_directory.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace psformer {
namespace {

// TMPDIR pointed at a directory of the test's for as long as it lives (Open MPI's base).
class TmpdirForTheTest {
 public:
  explicit TmpdirForTheTest(const std::string& path) {
    const char* old = getenv("TMPDIR");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("TMPDIR", path.c_str(), 1);
    unsetenv("OMPI_MCA_orte_local_tmpdir_base");
    unsetenv("OMPI_MCA_orte_tmpdir_base");
  }
  ~TmpdirForTheTest() {
    if (had_) {
      setenv("TMPDIR", old_.c_str(), 1);
    } else {
      unsetenv("TMPDIR");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// A session directory as mpirun `pid` leaves it, under BASE/ompi.HOST.UID; its contact.txt names
// `named_pid`.
std::filesystem::path MakeSessionDirectory(const std::filesystem::path& base, int pid, int named_pid) {
  const auto directory =
      base / ("ompi." + HostName() + "." + std::to_string(getuid())) / ("pid." + std::to_string(pid));
  std::filesystem::create_directories(directory / "0" / "0");
  std::filesystem::create_directories(directory / ("pmix_dstor_ds12_" + std::to_string(pid)));
  std::ofstream(directory / "contact.txt") << "1744961536.0;tcp://10.0.0.1:54647\n" << named_pid << "\n";
  std::ofstream(directory / "hwloc.sm") << "shared memory";
  return directory;
}

TEST(MpirunSessionDirectory, TheKilledMpirunsDirectoryGoesAndItsParentOnceEmpty) {
  testing::TempDir dir;
  TmpdirForTheTest tmpdir(dir.path().string());
  const auto killed = MakeSessionDirectory(dir.path(), 4242, 4242);
  const auto other = MakeSessionDirectory(dir.path(), 4243, 4243);  // another mpirun, still running

  EXPECT_EQ(RemoveKilledMpirunSessionDirectory(4242), killed.string());
  EXPECT_FALSE(std::filesystem::exists(killed));
  EXPECT_TRUE(std::filesystem::exists(other / "contact.txt"));
  EXPECT_TRUE(std::filesystem::exists(other / "hwloc.sm"));

  EXPECT_EQ(RemoveKilledMpirunSessionDirectory(4243), other.string());
  EXPECT_FALSE(std::filesystem::exists(other.parent_path()));
  EXPECT_TRUE(std::filesystem::exists(dir.path()));
}

TEST(MpirunSessionDirectory, ADirectoryThatNamesAnotherPidOrNoneIsLeftAlone) {
  testing::TempDir dir;
  TmpdirForTheTest tmpdir(dir.path().string());
  const auto wrong = MakeSessionDirectory(dir.path(), 5000, 5001);
  EXPECT_EQ(RemoveKilledMpirunSessionDirectory(5000), "");
  EXPECT_TRUE(std::filesystem::exists(wrong / "contact.txt"));

  const auto unnamed = MakeSessionDirectory(dir.path(), 6000, 6000);
  std::filesystem::remove(unnamed / "contact.txt");
  EXPECT_EQ(RemoveKilledMpirunSessionDirectory(6000), "");
  EXPECT_TRUE(std::filesystem::exists(unnamed / "hwloc.sm"));

  EXPECT_EQ(RemoveKilledMpirunSessionDirectory(7000), "");  // none at all
}

TEST(MpirunSessionDirectory, OpenMpisOwnBaseComesFirst) {
  testing::TempDir dir;
  TmpdirForTheTest tmpdir(dir.File("tmp"));
  setenv("OMPI_MCA_orte_tmpdir_base", dir.File("ompi").c_str(), 1);
  const std::vector<std::string> candidates = MpirunSessionDirectoryCandidates(42);
  unsetenv("OMPI_MCA_orte_tmpdir_base");
  ASSERT_GE(candidates.size(), 3u);
  const std::string tail = "/ompi." + HostName() + "." + std::to_string(getuid()) + "/pid.42";
  EXPECT_EQ(candidates.front(), dir.File("ompi") + tail);
  EXPECT_NE(std::find(candidates.begin(), candidates.end(), dir.File("tmp") + tail), candidates.end());
  EXPECT_EQ(candidates.back().rfind("/tmp/ompi.", 0), 0u) << candidates.back();
}

}  // namespace
}  // namespace psformer
