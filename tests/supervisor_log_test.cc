// The supervisor log reader behind `psformer status`: each kind of line, and lines of any length.
#include "launcher/supervisor_log.h"

#include <gtest/gtest.h>

namespace psformer {
namespace {

TEST(SupervisorLog, ReadsEachKindOfLine) {
  auto started =
      ParseSupervisorLogLine("I 2026-11-25 10:40:01.123 supervisor] worker-1: started pid 4242 (incarnation 3)");
  ASSERT_TRUE(started.has_value());
  EXPECT_EQ(started->role, "worker-1");
  EXPECT_EQ(started->kind, RoleLogEvent::Kind::kStarted);
  EXPECT_EQ(started->pid, 4242);
  EXPECT_EQ(started->incarnation, 3);

  auto restarting = ParseSupervisorLogLine(
      "W 2026-11-25 10:40:02.456 supervisor] worker-1: killed by signal 9 (Killed); restarting in 200 ms as "
      "incarnation 1");
  ASSERT_TRUE(restarting.has_value());
  EXPECT_EQ(restarting->kind, RoleLogEvent::Kind::kRestarting);
  EXPECT_EQ(restarting->detail, "killed by signal 9 (Killed)");

  auto finished = ParseSupervisorLogLine("I 2026-11-25 10:40:09.000 supervisor] pserver-0 finished");
  ASSERT_TRUE(finished.has_value());
  EXPECT_EQ(finished->role, "pserver-0");
  EXPECT_EQ(finished->kind, RoleLogEvent::Kind::kFinished);

  auto failed = ParseSupervisorLogLine("E x supervisor] worker-2: exited 6 times (cluster.max_restarts = 5)");
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->kind, RoleLogEvent::Kind::kFailed);

  EXPECT_FALSE(ParseSupervisorLogLine("I x supervisor] single-node job: 1 server(s)").has_value());
  EXPECT_FALSE(ParseSupervisorLogLine("I x supervisor] worker-: started pid 1 (incarnation 0)").has_value());
}

TEST(SupervisorLog, NumbersTooLargeAndLongLinesAreNoFailure) {
  auto huge = ParseSupervisorLogLine("I x] worker-1: started pid 99999999999999999999999 (incarnation 0)");
  ASSERT_TRUE(huge.has_value());
  EXPECT_EQ(huge->kind, RoleLogEvent::Kind::kOther);
  // ~30 KB once overflowed the regex reader's stack; a megabyte of near-misses is linear.
  std::string line;
  for (int i = 0; i < 100000; ++i) line += "] worker-";
  EXPECT_FALSE(ParseSupervisorLogLine(line).has_value());
  auto long_exit =
      ParseSupervisorLogLine("I x] worker-0: " + std::string(1 << 20, 'a') + "; restarting in 5 ms as incarnation 1");
  ASSERT_TRUE(long_exit.has_value());
  EXPECT_EQ(long_exit->detail.size(), size_t{1} << 20);
}

}  // namespace
}  // namespace psformer
