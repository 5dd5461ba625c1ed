// The role command line written by the supervisor reads back, through the role commands' own
// option definitions, as the arguments it was made from.
#include "launcher/role_arguments.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace psformer {
namespace {

// Parses `args` (the role's name first, as ToArgs writes them) with the role's options.
RoleArguments Parse(RoleSlot::Kind kind, const std::vector<std::string>& args) {
  po::options_description options;
  AddRoleOptions(kind, options);
  po::variables_map values;
  po::store(po::command_line_parser(std::vector<std::string>(args.begin() + 1, args.end())).options(options).run(),
            values);
  po::notify(values);
  return ReadRoleArguments(kind, values);
}

TEST(RoleArguments, AServerCommandLineReadsBackAsWritten) {
  RoleArguments server;
  server.kind = RoleSlot::Kind::kServer;
  server.config = "run/config.pbtxt";
  server.run_dir = "run";
  server.index = 1;
  server.endpoint = "tcp://10.0.0.2:7001";
  server.ipc_endpoint = "ipc:///run/ipc/pserver-1.sock";
  server.job_id = 18446744073709551557ull;  // beyond int64: the id is 64 random bits
  server.threads = 3;
  server.resume = true;
  const std::vector<std::string> args = server.ToArgs();
  ASSERT_FALSE(args.empty());
  EXPECT_EQ(args[0], "pserver");
  const RoleArguments read = Parse(RoleSlot::Kind::kServer, args);
  EXPECT_EQ(read.config, server.config);
  EXPECT_EQ(read.run_dir, server.run_dir);
  EXPECT_EQ(read.index, 1);
  EXPECT_EQ(read.endpoint, server.endpoint);
  EXPECT_EQ(read.ipc_endpoint, server.ipc_endpoint);
  EXPECT_EQ(read.job_id, server.job_id);
  EXPECT_EQ(read.threads, 3);
  EXPECT_TRUE(read.resume);
  EXPECT_EQ(read.incarnation, 0u);
}

TEST(RoleArguments, AWorkerCommandLineReadsBackAsWritten) {
  RoleArguments worker;
  worker.config = "run/config.pbtxt";
  worker.run_dir = "run";
  worker.index = 2;
  worker.servers = {"tcp://a:7000", "tcp://b:7001"};
  worker.job_id = 42;
  worker.gpu = 1;
  worker.threads = 5;  // the supervisor's share of the host (common/role_threads.h)
  const std::vector<std::string> args = worker.ToArgs();
  EXPECT_EQ(args[0], "worker");
  const RoleArguments read = Parse(RoleSlot::Kind::kWorker, args);
  EXPECT_EQ(read.index, 2);
  EXPECT_EQ(read.servers, worker.servers);
  EXPECT_EQ(read.job_id, 42u);
  EXPECT_EQ(read.gpu, 1);
  EXPECT_EQ(read.threads, 5);
  EXPECT_FALSE(read.resume);
}

// Same-host endpoints are paths under the run directory, which may hold a comma or a '%' (a
// run directory named "runs/en,de 50%" once split one endpoint into two).
TEST(RoleArguments, EndpointsWithCommasAndPercentSignsReadBackWhole) {
  for (RoleSlot::Kind kind : {RoleSlot::Kind::kWorker, RoleSlot::Kind::kAggregator}) {
    RoleArguments role;
    role.kind = kind;
    role.endpoint = "ipc:///r/ipc/aggregator-0.sock";
    role.servers = {"ipc:///runs/en,de 50%/ipc/pserver-0.sock", "tcp://b:7001", "ipc:///x/%2C,,%25/p.sock"};
    const std::vector<std::string> args = role.ToArgs();
    const auto list = std::find(args.begin(), args.end(), "--servers");
    ASSERT_NE(list, args.end());
    EXPECT_EQ(*(list + 1),
              "ipc:///runs/en%2Cde 50%25/ipc/pserver-0.sock,tcp://b:7001,ipc:///x/%252C%2C%2C%2525/p.sock");
    EXPECT_EQ(Parse(kind, args).servers, role.servers);
  }
}

TEST(RoleArguments, DefaultsAreLeftOffTheCommandLine) {
  RoleArguments worker;
  worker.servers = {"tcp://a:7000"};
  const std::vector<std::string> args = worker.ToArgs();
  for (const char* flag : {"--gpu", "--resume", "--threads", "--incarnation"}) {
    EXPECT_EQ(std::find(args.begin(), args.end(), flag), args.end()) << flag;
  }
  EXPECT_EQ(Parse(RoleSlot::Kind::kWorker, args).gpu, -1);
}

TEST(RoleArguments, TheSupervisorsIncarnationOptionIsOneTheRolesAccept) {
  for (RoleSlot::Kind kind : {RoleSlot::Kind::kServer, RoleSlot::Kind::kWorker}) {
    RoleArguments role;
    role.kind = kind;
    role.endpoint = "tcp://a:7000";
    role.servers = {"tcp://a:7000"};
    std::vector<std::string> args = role.ToArgs();
    args.insert(args.end(), {kIncarnationOption, "4"});
    EXPECT_EQ(Parse(kind, args).incarnation, 4u);
  }
}

}  // namespace
}  // namespace psformer
