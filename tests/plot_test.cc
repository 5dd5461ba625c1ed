// `psformer plot RUN_DIR`: a PNG of the expected size from a finished run; clear errors otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::CommandResult;
using testing::EndsSaying;
using testing::RunPsformer;
using testing::TempDir;

uint32_t BigEndian32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

TEST(PlotCommand, DrawsAPngOfTheAskedSize) {
  TempDir dir;
  const std::string run = dir.File("run");
  CommandResult r = RunPsformer(
      "train --config configs/copy.pbtxt --set training.max_steps=30 --set logging.every_steps=5 "
      "--set training.valid_every=10 --set training.stop_at_valid_accuracy=0 --run-dir " +
      run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::string png = dir.File("curves.png");
  r = RunPsformer("plot " + run + " --out " + png + " --size 640x400");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("(640x400, 6 training and 3 validation points)"), std::string::npos) << r.output;
  std::ifstream in(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 33u);
  // The PNG signature, then the IHDR chunk: length 13, type, width, height (big-endian).
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(BigEndian32(bytes, 8), 13u);
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(BigEndian32(bytes, 16), 640u);
  EXPECT_EQ(BigEndian32(bytes, 20), 400u);
  // The file ends with the IEND chunk: gnuplot finished writing it.
  EXPECT_EQ(bytes.substr(bytes.size() - 8, 4), "IEND");

  // Without --out: RUN_DIR/plot.png.
  r = RunPsformer("plot " + run);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/plot.png"));
  // An earlier plot is replaced; a file of another kind is not.
  r = RunPsformer("plot " + run + " --out " + png + " --size 320x200");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  dir.Write("notes.txt", "not a plot\n");
  r = RunPsformer("plot " + run + " --out " + dir.File("notes.txt"));
  EXPECT_TRUE(EndsSaying(r, 1, "--out " + dir.File("notes.txt") + " exists and is not a PNG image"));
  EXPECT_EQ(testing::ReadTextFile(dir.File("notes.txt")), "not a plot\n");
}

// A run with one logged step (stopped after its first logging step), or lines without a step,
// is drawn; gnuplot once refused the empty range of one step with its script echoed back.
TEST(PlotCommand, OneStepAndLinesWithoutAStepAreDrawn) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("run/logs"));
  dir.Write("run/metrics.jsonl", "{\"step\": 10, \"loss\": 2.0}\n{\"loss\": 1.0}\n");
  const std::string png = dir.File("one.png");
  const CommandResult r = RunPsformer("plot " + dir.File("run") + " --out " + png);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("1 line(s) without a step of 0 or more skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 training and 0 validation points"), std::string::npos) << r.output;
  EXPECT_EQ(testing::ReadTextFile(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST(PlotCommand, ADeviceIsNeverReplacedAndAFailedWriteFails) {
  TempDir dir;
  const std::string run = dir.File("run's");  // a quote in the name reaches gnuplot's title
  CommandResult r = RunPsformer(
      "train --config configs/copy.pbtxt --set training.max_steps=10 "
      "--set logging.every_steps=5 --set training.valid_every=0 --run-dir \"" +
      run + "\"");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  r = RunPsformer("plot \"" + run + "\" --out /dev/full");
  EXPECT_TRUE(EndsSaying(r, 1, "cannot write /dev/full: No space left on device"));
  EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
  struct stat st;
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  r = RunPsformer("plot \"" + run + "\" --out " + dir.path().string());
  EXPECT_TRUE(EndsSaying(r, 1, "it is a directory"));
}

// plot's scratch files go to $TMPDIR: one that does not exist is named, one whose path holds a
// quote works, and a gnuplot missing from PATH is said to be missing.
TEST(PlotCommand, TmpdirAndGnuplotFromTheEnvironment) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("run"));
  dir.Write("run/metrics.jsonl", "{\"step\":1,\"loss\":5.0}\n{\"step\":2,\"loss\":4.0}\n");
  const std::string run = dir.File("run");
  const std::string missing = dir.File("missing");
  CommandResult r = RunPsformer("plot " + run + " --out " + dir.File("a.png"), "TMPDIR=" + missing);
  EXPECT_TRUE(EndsSaying(r, 1,
                         "psformer plot: error: cannot make a temporary directory in " + missing +
                             " ($TMPDIR): No such file or directory; set TMPDIR to a writable directory"));
  std::filesystem::create_directory(dir.File("it's"));
  r = RunPsformer("plot " + run + " --out " + dir.File("b.png"), "TMPDIR=\"" + dir.File("it's") + "\"");
  EXPECT_EQ(r.exit_status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.File("b.png")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.File("it's")));  // the scratch directory went with the plot
  r = RunPsformer("plot " + run + " --out " + dir.File("c.png"), "PATH=" + missing);
  EXPECT_TRUE(EndsSaying(r, 1, "psformer plot: error: gnuplot is not installed (apt-get install gnuplot-nox"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("c.png")));
}

// A plot stopped by a signal to it alone (SIGTERM, as `kill PID` or a batch system sends) ends
// gnuplot too, before removing the scratch directory gnuplot draws into: it used to draw on,
// unwatched, into a directory already gone, for as long as a large plot takes. The gnuplot here
// is a stand-in that says its PID and sleeps.
TEST(PlotCommand, AStopEndsGnuplotToo) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("run"));
  dir.Write("run/metrics.jsonl", "{\"step\":1,\"loss\":5.0}\n{\"step\":2,\"loss\":4.0}\n");
  std::filesystem::create_directory(dir.File("bin"));
  const std::string pid_file = dir.File("gnuplot.pid");
  const std::string gnuplot = dir.Write("bin/gnuplot", "#!/bin/sh\necho $$ > " + pid_file + "\nexec sleep 60\n");
  std::filesystem::permissions(gnuplot, std::filesystem::perms::owner_all);
  const CommandResult r = testing::RunShell(
      "cd " + testing::SourceDir() + " && { PATH=" + dir.File("bin") + ":$PATH " + testing::PsformerBinary() +
      " plot " + dir.File("run") + " --out " + dir.File("p.png") + " & pid=$!; n=0; while [ ! -s " + pid_file +
      " ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done; kill -TERM $pid; wait $pid; echo \"status $?\"; "
      "if kill -0 $(cat " +
      pid_file + ") 2>/dev/null; then echo 'gnuplot runs on'; kill $(cat " + pid_file + "); fi; }");
  EXPECT_NE(r.output.find("status 143"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("psformer plot: terminated; removed its unfinished files: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("gnuplot runs on"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("p.png")));
}

TEST(PlotCommand, ClearErrors) {
  TempDir dir;
  CommandResult r = RunPsformer("plot " + dir.path().string());
  EXPECT_TRUE(EndsSaying(r, 1,
                         "psformer plot: error: " + dir.path().string() +
                             " has no metrics.jsonl: not a run directory, or no step logged yet"));
  dir.Write("metrics.jsonl", "");
  r = RunPsformer("plot " + dir.path().string());
  EXPECT_TRUE(EndsSaying(r, 1, "has no training step yet: nothing to plot"));
  r = RunPsformer("plot " + dir.path().string() + " --size 640");
  EXPECT_TRUE(EndsSaying(r, 2, "--size 640: expected WIDTHxHEIGHT"));
  // Sizes of the right form outside what is drawn are refused with the limits, not with
  // gnuplot's or Cairo's words.
  for (const std::string size : {"99999x99999", "1x1", "100000000000x5", "640x20000"}) {
    r = RunPsformer("plot " + dir.path().string() + " --size " + size);
    EXPECT_TRUE(EndsSaying(r, 2, "--size " + size + ": each side must be from 64 to 16384 pixels"));
  }
}

}  // namespace
}  // namespace psformer
