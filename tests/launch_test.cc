// `psformer launch`'s pure parts (label `unit`): reading a hostfile, choosing the hosts that
// answer with spares taking the place of silent ones, and the mpirun line built from them.
#include <gtest/gtest.h>

#include <filesystem>

#include "launcher/host_probe.h"
#include "launcher/hostfile.h"
#include "launcher/mpirun_command.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

TEST(Hostfile, ReadsHostsSlotsAndComments) {
  auto hosts = ParseHostfile("# the cluster\nnode0 slots=9\n\nnode1   slots=2 max_slots=4  # big\nnode2\n", "hosts");
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].host, "node0");
  EXPECT_EQ((*hosts)[0].slots, 9);
  EXPECT_EQ((*hosts)[1].host, "node1");
  EXPECT_EQ((*hosts)[1].slots, 2);
  EXPECT_EQ((*hosts)[2].slots, 1);
}

TEST(Hostfile, ErrorsNameTheFileAndLine) {
  struct BadHostfile {
    const char* text;
    const char* file;
    const char* error;
  };
  const BadHostfile cases[] = {
      {"node0 slots=2\nnode1 cpus=4\n", "hosts.txt", "hosts.txt:2: \"cpus=4\": expected slots=N after the host name"},
      {"node0 slots=0\n", "h", "h:1: \"slots=0\": the count must be at least 1"},
      {"node0 slots=two\n", "h", "h:1: \"slots=two\": the count must be a number"},
      {"node0 slots=99999999999\n", "h",
       "h:1: \"slots=99999999999\": the count is too large (at most 4096 processes a host)"},
      {"node0 slots=5000\n", "h", "h:1: \"slots=5000\": the count is too large (at most 4096 processes a host)"},
      {"localhost max_slots=2\n", "h",
       "h:1: \"max_slots=2\" gives no slots (it caps oversubscription in Open MPI); psformer places slots=N "
       "processes on a host: write \"localhost slots=2\""},
      {"node0 slots=4 max_slots=2\n", "h", "h:1: slots=4 is more than max_slots=2"},
      {"node0\nnode1\nnode0 slots=3\n", "h", "h:3: host node0 is listed twice"},
      {"# nothing\n\n", "h", "h: lists no hosts"},
      {"::1 slots=2\n", "h",
       "h:1: \"::1\": IPv6 addresses (and \"host:N\") are not taken: give the host's name or IPv4 address, and "
       "its slots as slots=N"},
      {"[::1]\n", "h",
       "h:1: \"[::1]\": IPv6 addresses (and \"host:N\") are not taken: give the host's name or IPv4 address, and "
       "its slots as slots=N"},
      {"localhost:3\n", "h",
       "h:1: \"localhost:3\": IPv6 addresses (and \"host:N\") are not taken: give the host's name or IPv4 "
       "address, and its slots as slots=N"},
      {"node0,node1 slots=2\n", "h",
       "h:1: \"node0,node1\": one host a line: a ',' would make mpirun place ranks on two"},
      {"-np slots=2\n", "h", "h:1: \"-np\": a host name cannot begin with '-'"},
      {"h\xc3\xa9llo\n", "h",
       "h:1: \"h\xc3\xa9llo\": not a host name (letters, digits, '.', '-' and '_'; found a letter outside ASCII)"},
      {"localhost slots=2 slots=3\n", "h", "h:1: \"slots=3\": slots is given twice on this line"},
  };
  for (const BadHostfile& c : cases) {
    auto parsed = ParseHostfile(c.text, c.file);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().message(), c.error);
  }
  EXPECT_FALSE(ReadHostfile("/nonexistent/hosts").ok());
}

std::string Names(const std::vector<HostSlots>& hosts) {
  std::string names;
  for (const HostSlots& h : hosts) names += h.host + ":" + std::to_string(h.slots) + " ";
  return names;
}

TEST(SelectHosts, TakesHostsInOrderUntilTheSlotsHoldTheRanks) {
  const std::vector<HostSlots> hosts = {{"a", 2}, {"b", 2}, {"c", 2}, {"spare", 2}};
  auto chosen = SelectHosts(hosts, {true, true, true, true}, 5);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(Names(*chosen), "a:2 b:2 c:1 ");
}

TEST(SelectHosts, ASilentHostsPlaceGoesToTheNextOneSoTheRankCountStays) {
  const std::vector<HostSlots> hosts = {{"a", 1}, {"b", 1}, {"c", 1}, {"spare", 1}};
  auto chosen = SelectHosts(hosts, {true, false, true, true}, 3);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(Names(*chosen), "a:1 c:1 spare:1 ");
}

TEST(SelectHosts, TooFewAnsweringHostsSayHaveAndNeed) {
  const std::vector<HostSlots> hosts = {{"a", 2}, {"b", 1}, {"c", 1}};
  auto chosen = SelectHosts(hosts, {true, false, false}, 3);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().message(),
            "the job needs 3 process slot(s) but the hosts that answer have 2 (no answer from b, c); add hosts to "
            "the hostfile or start fewer processes (-np)");
}

TEST(SelectHosts, TooFewAnsweringHostsSayWhyEachWasSilent) {
  const std::vector<HostSlots> hosts = {{"a", 2}, {"b", 1}, {"c", 1}};
  auto chosen = SelectHosts(hosts, {true, false, false}, 3,
                            {"", "ssh: connect to host b port 22: Connection refused", "no reply within 10 s"});
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().message(),
            "the job needs 3 process slot(s) but the hosts that answer have 2 (no answer from b: ssh: connect to "
            "host b port 22: Connection refused; c: no reply within 10 s); add hosts to the hostfile or start fewer "
            "processes (-np)");
}

// A probe's reason is the last line the probe said, else its exit status or signal, else that it
// did not reply in time.
TEST(ProbeHosts, ASilentHostIsNamedWithWhatItsProbeSaid) {
  testing::TempDir dir;
  const std::string agent = dir.Write("agent",
                                      "#!/bin/sh\n"
                                      "case \"$1\" in\n"
                                      "  up) exit 0 ;;\n"
                                      "  refused) echo 'warning: first line' >&2; printf 'connect to host %s: "
                                      "Connection refused\\r\\n\\n' \"$1\" >&2; exit 255 ;;\n"
                                      "  mute) exit 3 ;;\n"
                                      "  killed) kill -9 $$ ;;\n"
                                      "  slow) exec sleep 30 ;;\n"
                                      "esac\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  HostProbeOptions options;
  options.rsh_agent = agent;
  options.timeout = std::chrono::milliseconds(1500);
  std::vector<std::string> why;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<bool> answers = ProbeHosts({"up", "refused", "mute", "killed", "slow"}, options, &why);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));  // the slow one was ended
  EXPECT_EQ(answers, (std::vector<bool>{true, false, false, false, false}));
  ASSERT_EQ(why.size(), 5u);
  EXPECT_EQ(why[0], "");
  EXPECT_EQ(why[1], "connect to host refused: Connection refused");
  EXPECT_EQ(why[2], "'" + agent + " mute true' exited with status 3");
  EXPECT_EQ(why[3], "'" + agent + " killed true' ended by signal 9");
  EXPECT_EQ(why[4], "no reply to '" + agent + " slow true' within 1500 ms");
}

TEST(MpirunCommand, OverSshFailsFastAndFillsHostsSlotBySlot) {
  MpirunOptions options;
  options.processes = 18;
  options.hosts = {{"node0", 9}, {"node1", 9}};
  options.as_root = true;
  options.forward_environment = {"OMP_NUM_THREADS"};
  options.program = {"/opt/psformer", "train", "--config", "base.pbtxt"};
  EXPECT_EQ(ShellQuote(BuildMpirunCommand(options)),
            "mpirun --allow-run-as-root -np 18 --host node0:9,node1:9 --map-by slot --bind-to none "
            "--mca plm_rsh_args '-o ConnectTimeout=10 -o BatchMode=yes' -x OMP_NUM_THREADS "
            "/opt/psformer train --config base.pbtxt");
}

TEST(MpirunCommand, AnRshAgentAndANetworkReplaceSsh) {
  MpirunOptions options;
  options.processes = 3;
  options.hosts = {{"h0", 1}, {"h1", 2}};
  options.rsh_agent = "/run/agent";
  options.network = "10.213.1.0/24";
  options.program = {"psformer", "train"};
  EXPECT_EQ(ShellQuote(BuildMpirunCommand(options)),
            "mpirun -np 3 --host h0:1,h1:2 --map-by slot --bind-to none --mca plm_rsh_agent /run/agent "
            "--mca oob_tcp_if_include 10.213.1.0/24 --mca btl_tcp_if_include 10.213.1.0/24 psformer train");
}

TEST(MpirunCommand, ForwardsWhatRanksNeedButNeverTheJobsKeys) {
  const std::vector<std::string> names =
      EnvironmentToForward({"HOME=/root", "PATH=/usr/bin", "PSFORMER_CURVE_KEYS=secret", "PSFORMER_HEARTBEAT_FD=3",
                            "PSFORMER_SOURCE_DIR=/src", "OMP_NUM_THREADS=2", "TERM=xterm", "CUDA_VISIBLE_DEVICES=0,1"});
  EXPECT_EQ(names,
            (std::vector<std::string>{"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PATH", "PSFORMER_SOURCE_DIR"}));
}

TEST(ShellQuote, QuotesWhatTheShellWouldSplitOrExpand) {
  EXPECT_EQ(ShellQuote({"a", "b c", "it's", "$HOME", "", "x=1,y:2"}), "a 'b c' 'it'\\''s' '$HOME' '' x=1,y:2");
}

}  // namespace
}  // namespace psformer
