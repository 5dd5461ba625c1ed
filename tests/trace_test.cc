// The step timeline (common/trace.h, docs/tracing.md): the window it is asked for, what a process
// records inside it and nowhere else, and a traced job: every role writes its file, and the job
// trains the same model as without a trace.
#include "common/trace.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::ReadTextFile;
using testing::TempDir;

// Sets PSFORMER_TRACE_STEPS for one test.
class TraceVariable {
 public:
  explicit TraceVariable(const char* value) { setenv(kTraceStepsVariable, value, 1); }
  ~TraceVariable() { unsetenv(kTraceStepsVariable); }
};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TraceWindow, ReadFromTheVariable) {
  {
    const TraceVariable v("20:5");
    auto w = TraceWindowFromEnvironment();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(w->first_step, 20);
    EXPECT_EQ(w->steps, 5);
  }
  auto none = TraceWindowFromEnvironment();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->steps, 0);
  for (const char* bad : {"20", "0:5", "5:0", "5:-1", "x:3", "5:3x", ":", "20:5:1"}) {
    const TraceVariable v(bad);
    auto w = TraceWindowFromEnvironment();
    ASSERT_FALSE(w.ok()) << bad;
    EXPECT_NE(w.status().message().find(std::string("PSFORMER_TRACE_STEPS=") + bad), std::string::npos)
        << w.status().message();
    EXPECT_NE(w.status().message().find("FROM:COUNT"), std::string::npos) << w.status().message();
  }
}

TEST(Trace, RecordsTheWindowsStepsOnlyAndWritesOnceItIsPast) {
  TempDir dir;
  const std::string path = dir.File("trace/worker-3.json");
  Trace::Configure(path, "worker-3", {.first_step = 2, .steps = 2});
  Trace::AtStep(1);
  { const TraceSpan before("before_the_window", 1); }
  Trace::AtStep(2);
  { const TraceSpan inside("inside_the_window", 2, 7); }
  Trace::AtStep(3);
  { const TraceSpan inside("inside_the_window", 3, 7); }
  EXPECT_FALSE(std::filesystem::exists(path)) << "written before the window ended";
  Trace::AtStep(4);  // past it: written
  { const TraceSpan after("after_the_window", 4); }
  ASSERT_TRUE(std::filesystem::exists(path));
  const std::string text = ReadTextFile(path);
  EXPECT_EQ(Count(text, "\"inside_the_window\""), 2u) << text;
  EXPECT_EQ(Count(text, "before_the_window"), 0u) << text;
  EXPECT_EQ(Count(text, "after_the_window"), 0u) << text;
  EXPECT_NE(text.find("\"name\": \"worker-3\""), std::string::npos) << text;  // the process's name
  EXPECT_NE(text.find("\"args\": {\"a\": 3, \"b\": 7}"), std::string::npos) << text;
  EXPECT_FALSE(Trace::on());
  EXPECT_TRUE(Trace::Finish().ok());  // written already: nothing more
  EXPECT_EQ(Count(ReadTextFile(path), "\"inside_the_window\""), 2u);
}

TEST(Trace, AJobShorterThanTheWindowWritesWhatItRecordedWhenItEnds) {
  TempDir dir;
  const std::string path = dir.File("t.json");
  Trace::Configure(path, "pserver-0", {.first_step = 1, .steps = 100});
  Trace::AtStep(1);
  { const TraceSpan inside("take_push", 1); }
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(Trace::Finish().ok());
  EXPECT_EQ(Count(ReadTextFile(path), "\"take_push\""), 1u);
}

TEST(Trace, NeverEnteredWritesNothing) {
  TempDir dir;
  const std::string path = dir.File("t.json");
  Trace::Configure(path, "worker-0", {.first_step = 50, .steps = 2});
  Trace::AtStep(1);
  { const TraceSpan outside("outside", 1); }
  ASSERT_TRUE(Trace::Finish().ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

const char kJob[] =
    "--config configs/copy.pbtxt --set training.max_steps=12 --set training.valid_every=0 "
    "--set logging.every_steps=4 --set checkpoint.every_steps=0 --set cluster.workers=2 --set cluster.servers=2";

TEST(TracedJob, EveryRoleWritesItsTimelineAndTheModelIsTheSame) {
  TempDir dir;
  const std::string plain = testing::TrainedModelDigest(dir, kJob, {"plain", ""});
  std::string traced;
  {
    const TraceVariable v("5:3");
    traced = testing::TrainedModelDigest(dir, kJob, {"traced", ""});
  }
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(traced, plain) << "a trace changed what was trained";
  EXPECT_FALSE(std::filesystem::exists(dir.File("plain/trace")));
  for (const char* role : {"worker-0", "worker-1"}) {
    const std::string text = ReadTextFile(dir.File(std::string("traced/trace/") + role + ".json"));
    EXPECT_EQ(Count(text, "\"name\": \"step\""), 3u) << role << ": " << text.substr(0, 2000);
    for (const char* span : {"\"compute\"", "\"finish_push\"", "\"send_push\"", "\"psf-client\""}) {
      EXPECT_NE(text.find(span), std::string::npos) << role << " has no " << span;
    }
  }
  for (const char* role : {"pserver-0", "pserver-1"}) {
    const std::string text = ReadTextFile(dir.File(std::string("traced/trace/") + role + ".json"));
    EXPECT_NE(text.find("\"take_push\""), std::string::npos) << role << ": " << text.substr(0, 2000);
    EXPECT_NE(text.find("\"send_params\""), std::string::npos) << role;
  }
  // The summary reads them.
  auto summary = testing::RunShell(testing::SourceDir() + "/scripts/trace-summary " + dir.File("traced"));
  EXPECT_EQ(summary.exit_status, 0) << summary.output;
  EXPECT_NE(summary.output.find("== worker-1, step 7"), std::string::npos) << summary.output;
}

// Summing on hosts: each host group's aggregator writes its timeline too.
TEST(TracedJob, AggregatorsWriteTheirsWhenSummingOnHosts) {
  TempDir dir;
  {
    const TraceVariable v("5:3");
    const std::string grouped = std::string(kJob) + " --set cluster.workers=4 --set cluster.host_groups=2,2";
    ASSERT_FALSE(testing::TrainedModelDigest(dir, grouped, {"grouped", ""}).empty());
  }
  for (const char* role : {"aggregator-0", "aggregator-1"}) {
    const std::string text = ReadTextFile(dir.File(std::string("grouped/trace/") + role + ".json"));
    EXPECT_NE(text.find("\"send_sum\""), std::string::npos) << role << ": " << text.substr(0, 2000);
    EXPECT_NE(text.find(std::string("\"name\": \"") + role + "\""), std::string::npos) << role;
  }
}

TEST(TracedJob, AMalformedWindowIsRefusedBeforeAnythingStarts) {
  TempDir dir;
  auto r = testing::RunShell("cd " + testing::SourceDir() + " && PSFORMER_TRACE_STEPS=five " +
                             testing::PsformerBinary() + " train " + kJob + " --run-dir " + dir.File("run"));
  EXPECT_EQ(r.exit_status, 2) << r.output;
  EXPECT_NE(r.output.find("PSFORMER_TRACE_STEPS=five: wants FROM:COUNT"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("run/logs"))) << "roles were started";
}

}  // namespace
}  // namespace psformer
