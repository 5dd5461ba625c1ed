// Jobs across hosts (label `cluster`): a cluster simulated on this machine by scripts/cluster-sim
// (each host a network namespace with its own address and host name, linked by a bridge), jobs
// started by `psformer launch`, hosts killed and links cut mid-run, and every result compared
// bitwise with an undisturbed single-node run. Skipped, with the reason, where this machine
// cannot make network namespaces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "common/proto/tensorboard_event.pb.h"
#include "common/tensorboard/record_file.h"
#include "tests/background_job.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::BackgroundJob;
using testing::CommandResult;
using testing::EndsSaying;
using testing::ModelDigest;
using testing::RunPsformer;
using testing::RunShell;
using testing::TempDir;
using testing::WaitUntil;

// 2 workers and 1 server on the copy task: short enough for a shared 2-core machine, with a
// checkpoint every 8 steps for the restarts to continue from.
const char* kJob =
    "--config configs/copy.pbtxt --set training.max_steps=40 --set training.valid_every=20 "
    "--set logging.every_steps=2 --set checkpoint.every_steps=8 --set cluster.workers=2 --set cluster.servers=1";

// For tests that act on a running job: on a quiet machine kJob's 40 steps take about a second,
// less than a Ctrl-C takes to reach every rank through mpirun or a test takes to cut a link, so
// these hold half the messages 100 ms (steps of ~0.2 s). That changes no weight: BSP sums in
// worker order, whatever the timing.
const char* kSlowSteps = " --set fault.delay_fraction=0.5 --set fault.delay_ms=100";

// The text events of a run's TensorBoard files (RUN_DIR/tensorboard), one a line.
std::string TextEvents(const std::string& run) {
  std::string texts;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run + "/tensorboard", ec)) {
    if (!entry.is_regular_file()) continue;  // a server's own run
    auto records = tensorboard::ReadRecords(entry.path().string());
    if (!records.ok()) continue;
    for (const std::string& record : *records) {
      tensorboard::Event event;
      if (!event.ParseFromString(record)) continue;
      for (const auto& value : event.summary().value()) {
        if (value.has_tensor() && value.tensor().string_val_size() > 0) texts += value.tensor().string_val(0) + "\n";
      }
    }
  }
  return texts;
}

std::string ClusterSim(const std::string& arguments) {
  return testing::SourceDir() + "/scripts/cluster-sim " + arguments;
}

// A cluster of `hosts` + `spares` namespaces, up for the life of the object, under a name of
// its own so that test runs side by side do not meet; taken down (everything it made) at the end,
// also when the test failed.
class SimulatedCluster {
 public:
  SimulatedCluster(int hosts, int spares) {
    std::random_device rd;
    const char* kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    name_ = "t";
    for (int i = 0; i < 5; ++i) name_ += kAlphabet[rd() % 36];
    const CommandResult r = RunShell(
        ClusterSim("up " + std::to_string(hosts) + " --spares " + std::to_string(spares) + " --name " + name_));
    why_ = r.output;
    if (r.exit_status == 3) {
      unavailable_ = true;
      return;
    }
    if (r.exit_status != 0) return;
    hostfile_ = Field(r.output, "hostfile");
    agent_ = Field(r.output, "agent");
    subnet_ = Field(r.output, "subnet");
    hosts_ = Split(Field(r.output, "hosts"));
    spares_ = Split(Field(r.output, "spares"));
    up_ = !hostfile_.empty() && !agent_.empty() && static_cast<int>(hosts_.size()) == hosts;
  }
  ~SimulatedCluster() {
    if (!unavailable_) RunShell(ClusterSim("down --name " + name_));
  }
  SimulatedCluster(const SimulatedCluster&) = delete;
  SimulatedCluster& operator=(const SimulatedCluster&) = delete;

  bool unavailable() const { return unavailable_; }
  bool up() const { return up_; }
  const std::string& why() const { return why_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::vector<std::string>& spares() const { return spares_; }

  // The arguments of `psformer launch` for `ranks` ranks on this cluster, before "--".
  std::string LaunchOptions(int ranks, const std::string& extra = "") const {
    return "launch --hostfile " + hostfile_ + " -np " + std::to_string(ranks) + " --rsh-agent " + agent_ +
           " --network " + subnet_ + " " + extra;
  }
  CommandResult Run(const std::string& arguments) const { return RunShell(ClusterSim(arguments)); }

 private:
  static std::string Field(const std::string& output, const std::string& key) {
    std::smatch m;
    if (!std::regex_search(output, m, std::regex("(^|\n)" + key + "=([^\n]*)"))) return "";
    return m[2].str();
  }
  static std::vector<std::string> Split(const std::string& list) {
    std::vector<std::string> items;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) items.push_back(item);
    return items;
  }

  std::string name_, hostfile_, agent_, subnet_, why_;
  std::vector<std::string> hosts_, spares_;
  bool unavailable_ = false;
  bool up_ = false;
};

// The digest of the job trained undisturbed in single-node mode (computed once per test binary).
const std::string& UndisturbedDigest() {
  static const std::string digest = [] {
    TempDir dir;
    const CommandResult r = RunPsformer(std::string("train ") + kJob + " --run-dir " + dir.File("single"));
    EXPECT_EQ(r.exit_status, 0) << r.output;
    return ModelDigest(dir.File("single") + "/model.bin");
  }();
  return digest;
}

// What every test on a simulated cluster starts from: `kHosts` hosts and `kSpares` spares up (or
// the test skipped, with the reason, where namespaces cannot be made), and a run directory.
template <int kHosts, int kSpares>
class OnSimulatedCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<SimulatedCluster>(kHosts, kSpares);
    if (cluster_->unavailable()) GTEST_SKIP() << cluster_->why();
    ASSERT_TRUE(cluster_->up()) << cluster_->why();
  }

  // `psformer launch` of kJob on every host, with `launch_options` before "--" and
  // `train_options` after the job's.
  std::string LaunchJob(const std::string& launch_options = "", const std::string& train_options = "") const {
    return cluster_->LaunchOptions(kHosts, launch_options) + " -- train " + kJob + train_options + " --run-dir " + run_;
  }
  // That launch started in the background, once it has logged step `step`; null (and the test
  // failed, with the launch's output) when it did not get there in 180 s.
  // `environment` ("NAME=VALUE ..."): set for the launch.
  std::unique_ptr<BackgroundJob> StartJobUntilStep(const std::string& launch_options, int64_t step,
                                                   const std::string& train_options = "",
                                                   const std::string& environment = "") {
    auto job = std::make_unique<BackgroundJob>(LaunchJob(launch_options, train_options), dir_.File("launch.out"),
                                               environment.empty() ? "" : "env " + environment + " ");
    if (testing::WaitForStep(job.get(), run_, step, std::chrono::seconds(180))) return job;
    ADD_FAILURE() << "the job did not reach step " << step << ":\n" << job->Output();
    return nullptr;
  }
  const SimulatedCluster& cluster() const { return *cluster_; }

  std::unique_ptr<SimulatedCluster> cluster_;
  TempDir dir_;
  const std::string run_ = dir_.File("run");
};
using Cluster = OnSimulatedCluster<3, 0>;
using ClusterWithASpare = OnSimulatedCluster<3, 1>;

TEST_F(Cluster, ThreeHostsTrainTheWeightsOfSingleNodeMode) {
  const CommandResult r = RunPsformer(LaunchJob());
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("psformer launch: mpirun"), std::string::npos) << r.output;
  EXPECT_FALSE(UndisturbedDigest().empty());
  EXPECT_EQ(ModelDigest(run_ + "/model.bin"), UndisturbedDigest());
}

// "rank R runs ROLE on host H; servers at E" from every supervisor's log, joined.
std::string Placement(const std::string& run) {
  static const std::regex kLine("rank [0-9]+ runs [a-z]+-[0-9]+ on host [^;]+; servers at [^\n]+");
  const std::string logs = testing::ReadRunLogs(run);
  std::string lines;
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), kLine); it != std::sregex_iterator(); ++it) {
    lines += it->str() + "\n";
  }
  return lines;
}

TEST_F(Cluster, EachRoleRunsOnItsOwnHostAndReachesTheServerByName) {
  const CommandResult r = RunPsformer(LaunchJob("", " --set training.max_steps=4"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::string placement = Placement(run_);
  // One rank on each host (one slot each), and the server's endpoint names its host, not an
  // address only this machine's loopback reaches.
  for (int rank = 0; rank < 3; ++rank) {
    const std::regex line("rank " + std::to_string(rank) + " runs [a-z]+-[0-9]+ on host " + cluster().hosts()[rank] +
                          "; servers at tcp://psf-[a-z0-9]+-[0-9]+:[0-9]+");
    EXPECT_TRUE(std::regex_search(placement, line)) << "rank " << rank << ":\n" << placement;
  }
  // The server takes the first host (servers go round-robin from there), the workers the others.
  EXPECT_NE(placement.find("pserver-0 on host " + cluster().hosts()[0]), std::string::npos) << placement;
  EXPECT_NE(placement.find("worker-0 on host " + cluster().hosts()[1]), std::string::npos) << placement;
  EXPECT_NE(placement.find("worker-1 on host " + cluster().hosts()[2]), std::string::npos) << placement;
  EXPECT_NE(placement.find("servers at tcp://" + cluster().hosts()[0] + ":"), std::string::npos) << placement;
}

// The node dies: its link goes down and every process on it is SIGKILLed. The launch notices the
// host's silence, ends the job, and starts it again with --resume on the two hosts left plus the
// spare; the weights are those of a run that never lost a node.
TEST_F(ClusterWithASpare, ALostHostIsReplacedByASpareAndTheWeightsDoNotChange) {
  {
    const auto job = StartJobUntilStep("--max-restarts 2 --host-timeout 6", 12);
    ASSERT_NE(job, nullptr);
    const CommandResult killed = cluster().Run("kill " + cluster().hosts()[1]);
    ASSERT_EQ(killed.exit_status, 0) << killed.output;
    ASSERT_EQ(job->Wait(std::chrono::seconds(300)), 0) << job->Output();
    const std::string out = job->Output();
    // Here mpirun sees the host's daemon die (it is mpirun's child, as ssh would be); on a real
    // network the launch's host timeout ends the run instead (the link tests below).
    EXPECT_NE(out.find("restart 1 of 2: "), std::string::npos) << out;
    EXPECT_NE(out.find("hosts now " + cluster().hosts()[0] + "," + cluster().hosts()[2] + "," + cluster().spares()[0] +
                       " (were " + cluster().hosts()[0] + "," + cluster().hosts()[1] + "," + cluster().hosts()[2] +
                       "; no answer from " + cluster().hosts()[1]),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("restart 2 of 2"), std::string::npos) << out;
    EXPECT_NE(TextEvents(run_).find("psformer launch: restart 1 of 2: "), std::string::npos) << TextEvents(run_);
  }
  EXPECT_FALSE(UndisturbedDigest().empty());
  EXPECT_EQ(ModelDigest(run_ + "/model.bin"), UndisturbedDigest());
  // The killed host's Open MPI daemon left its session directory in the /tmp the namespaces
  // share; taking the cluster down removes it with the rest.
  std::vector<std::string> hosts = cluster().hosts();
  hosts.insert(hosts.end(), cluster().spares().begin(), cluster().spares().end());
  cluster_.reset();
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    const std::string name = entry.path().filename().string();
    for (const std::string& host : hosts) {
      EXPECT_NE(name.rfind("ompi." + host + ".", 0), 0u) << entry.path() << " outlived the cluster";
    }
  }
}

// A cable pulled and put back within the host timeout: TCP and ZeroMQ carry on, nothing restarts.
TEST_F(Cluster, ALinkDownForLessThanTheHostTimeoutCostsNoRestart) {
  {
    const auto job = StartJobUntilStep("--max-restarts 2 --host-timeout 20", 6, kSlowSteps);
    ASSERT_NE(job, nullptr);
    ASSERT_EQ(cluster().Run("link " + cluster().hosts()[2] + " down").exit_status, 0);
    ASSERT_LT(testing::LastLoggedStep(run_), 40) << "the job ended before the link went down";
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ASSERT_EQ(cluster().Run("link " + cluster().hosts()[2] + " up").exit_status, 0);
    ASSERT_EQ(job->Wait(std::chrono::seconds(300)), 0) << job->Output();
    EXPECT_EQ(job->Output().find("restart"), std::string::npos) << job->Output();
  }
  EXPECT_EQ(ModelDigest(run_ + "/model.bin"), UndisturbedDigest());
}

// `rate` shapes a host's link at another rate, or ranks what it sends from some source ports
// last (bench/host_summing_bench.sh LINKS=pushes-first), and refuses what is not a rate or port.
TEST_F(Cluster, ARateShapesOrRanksAHostsLinkAndRefusesWhatIsNotOne) {
  const std::string host = cluster().hosts()[1];
  const auto qdiscs = [&] {
    return cluster().Run("exec " + host + " 'tc qdisc show dev eth0; tc class show dev eth0'").output;
  };
  ASSERT_EQ(cluster().Run("rate " + host + " 200mbit").exit_status, 0);
  EXPECT_NE(qdiscs().find("qdisc tbf "), std::string::npos) << qdiscs();
  EXPECT_NE(qdiscs().find("rate 200Mbit"), std::string::npos) << qdiscs();
  ASSERT_EQ(cluster().Run("rate " + host + " 200mbit --sport-last 30016").exit_status, 0);
  EXPECT_NE(qdiscs().find("qdisc htb 1: root"), std::string::npos) << qdiscs();
  EXPECT_NE(qdiscs().find("class htb 1:20 parent 1:1 prio 1"), std::string::npos) << qdiscs();
  ASSERT_EQ(cluster().Run("rate " + host + " 200mbit").exit_status, 0);
  EXPECT_EQ(qdiscs().find("htb"), std::string::npos) << qdiscs();

  CommandResult r = cluster().Run("rate " + host + " fast");
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("rate fast: not a rate"), std::string::npos) << r.output;
  r = cluster().Run("rate " + host + " 200mbit --sport-last 30000");
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("--sport-last 30000: a port from 1024 to 65472, a multiple of 64"), std::string::npos)
      << r.output;
  r = cluster().Run("rate psf-nosuch-0 200mbit");
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("no such host"), std::string::npos) << r.output;
}

// Cut off for longer than the host timeout: the job is ended and started again without the silent
// host (a spare takes its place), and still ends with the same weights. The mpirun that could not
// reach the host to end it is killed, and its session directory on this host (Open MPI's, under
// TMPDIR) goes with it; a private TMPDIR keeps other tests' mpiruns out of sight.
TEST_F(ClusterWithASpare, ALinkDownForLongerIsRestartedAndTheWeightsDoNotChange) {
  TempDir tmpdir;
  {
    const auto job = StartJobUntilStep("--max-restarts 2 --host-timeout 6", 12, "", "TMPDIR=" + tmpdir.path().string());
    ASSERT_NE(job, nullptr);
    ASSERT_EQ(cluster().Run("link " + cluster().hosts()[0] + " down").exit_status, 0);
    // Up again only once the launch has restarted the job elsewhere.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (job->Output().find("restart 1 of 2") == std::string::npos && !job->Exited() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ASSERT_EQ(cluster().Run("link " + cluster().hosts()[0] + " up").exit_status, 0);
    ASSERT_EQ(job->Wait(std::chrono::seconds(300)), 0) << job->Output();
    EXPECT_NE(job->Output().find("restart 1 of 2: host " + cluster().hosts()[0] + " has not answered"),
              std::string::npos)
        << job->Output();
  }
  EXPECT_EQ(ModelDigest(run_ + "/model.bin"), UndisturbedDigest());
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  for (const auto& entry : std::filesystem::directory_iterator(tmpdir.path())) {
    EXPECT_NE(entry.path().filename().string().rfind(std::string("ompi.") + name + ".", 0), 0u)
        << entry.path() << " (mpirun's session directory) outlived the launch";
  }
}

// CURVE across hosts: a worker started by hand on another host, without the job's keys, reaches
// the server's port but gets no answer (ZeroMQ drops it in the handshake: a client without keys
// cannot even greet a CURVE server), none of its messages reaches the server's validator, and the
// job trains on undisturbed.
TEST_F(ClusterWithASpare, AClientWithoutTheJobsKeyIsRefusedFromAnotherHost) {
  std::filesystem::create_directories(dir_.File("intruder"));
  {
    const auto job = StartJobUntilStep("", 4, kSlowSteps);
    ASSERT_NE(job, nullptr);
    std::smatch m;
    const std::string placement = Placement(run_);
    ASSERT_TRUE(std::regex_search(placement, m, std::regex("servers at tcp://([^:]+):([0-9]+)"))) << placement;
    const std::string server_host = m[1].str(), port = m[2].str();
    const std::string intruder = cluster().spares()[0];
    // The port is open to the intruder's host: a plain TCP connection is accepted.
    // (The agent, like ssh, hands the remote shell its words joined by spaces: quoted twice.)
    const CommandResult reach = cluster().Run("exec " + intruder + " \"timeout 5 bash -c 'exec 3<>/dev/tcp/" +
                                              server_host + "/" + port + "'\"");
    EXPECT_EQ(reach.exit_status, 0) << reach.output;
    // The intruder is no part of the job: it takes the run's config without the job's injected
    // delays. `timeout -k` ends it even if it ignored the SIGTERM.
    std::string config = testing::ReadTextFile(run_ + "/config.pbtxt");
    const size_t delay = config.find("delay_fraction: 0.5");
    ASSERT_NE(delay, std::string::npos) << config;
    config.replace(delay, std::string("delay_fraction: 0.5").size(), "delay_fraction: 0");
    // Nor does it sum on a host of the job (one worker a host: [1, 1]): it talks to the server.
    config = std::regex_replace(config, std::regex("host_groups: [0-9]+\n"), "");
    std::ofstream(dir_.File("intruder.pbtxt")) << config;
    const CommandResult r =
        cluster().Run("exec " + intruder + " timeout -k 5 10 " + testing::PsformerBinary() + " worker --config " +
                      dir_.File("intruder.pbtxt") + " --run-dir " + dir_.File("intruder") +
                      " --index 0 --servers tcp://" + server_host + ":" + port);
    EXPECT_NE(r.exit_status, 0) << r.output;
    EXPECT_NE(r.output.find("unauthenticated"), std::string::npos) << r.output;
    // No answer came: either its resend said so, or (when the failed handshake left ZeroMQ no
    // connection to queue on) its very first send waited for room until `timeout`'s SIGTERM
    // asked it to stop, whichever of its threads the signal reached. `timeout -k` would kill
    // it 5 s later; it must not come to that.
    const bool said_no_answer = r.output.find("no answer from shard 0 to HELLO") != std::string::npos;
    const bool stopped_sending = r.output.find(
                                     "stopped before training (asked to stop while waiting for the "
                                     "servers: van: asked to stop while waiting for room") != std::string::npos;
    EXPECT_TRUE(said_no_answer || stopped_sending) << r.output;
    EXPECT_NE(r.exit_status, 137) << r.output;                                     // ended by `timeout -k`'s SIGKILL
    EXPECT_EQ(r.output.find("rejoining at step"), std::string::npos) << r.output;  // no HELLO answered
    ASSERT_EQ(job->Wait(std::chrono::seconds(300)), 0) << job->Output();
  }
  const std::string server_log = testing::ReadTextFile(std::filesystem::path(run_) / "logs" / "pserver-0.log");
  EXPECT_NE(server_log.find("CURVE on"), std::string::npos) << server_log;
  EXPECT_NE(server_log.find("refused messages: none"), std::string::npos) << server_log;
  EXPECT_EQ(ModelDigest(run_ + "/model.bin"), UndisturbedDigest());
}

// Ctrl-C stops the job in order (the launch passes it on to mpirun once) and is not restarted;
// --resume then continues, to the same weights, from the checkpoint the stop wrote or, where
// mpirun ended the ranks before it was complete (it kills them about a second after passing
// the Ctrl-C on: seen on a loaded machine), from the periodic one of step 8, which the test
// waits for so that there is always a checkpoint to name and continue from.
TEST_F(Cluster, CtrlCStopsTheJobAndIsNotRestarted) {
  {
    const auto job = StartJobUntilStep("--max-restarts 2", 8, kSlowSteps);
    ASSERT_NE(job, nullptr);
    ASSERT_TRUE(testing::WaitForCheckpoint(job.get(), run_, 8, std::chrono::seconds(120))) << job->Output();
    job->SignalGroup(SIGINT);
    EXPECT_EQ(job->Wait(std::chrono::seconds(200)), 130) << job->Output();
    EXPECT_NE(job->Output().find("interrupted; not restarting. Continue with"), std::string::npos) << job->Output();
    EXPECT_EQ(job->Output().find("restart 1"), std::string::npos) << job->Output();
  }
  EXPECT_FALSE(std::filesystem::exists(run_ + "/model.bin"));
  const CommandResult resumed = RunPsformer(LaunchJob("", " --resume"));
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_EQ(ModelDigest(run_ + "/model.bin"), UndisturbedDigest());
}

TEST(Launch, TooFewHostsIsAnErrorThatSaysHaveAndNeed) {
  TempDir dir;
  // Hosts that never answer: the agent is `false`, as ssh is to a host that is down.
  const std::string hostfile = dir.Write("hosts", "nodeA slots=2\nnodeB\n");
  const CommandResult r = RunPsformer("launch --hostfile " + hostfile + " -np 3 --rsh-agent /bin/false -- train " +
                                      kJob + " --run-dir " + dir.File("run"));
  EXPECT_TRUE(EndsSaying(r, 1,
                         "psformer launch: error: the job needs 3 process slot(s) but the hosts that answer have 0 "
                         "(no answer from nodeA: '/bin/false nodeA true' exited with status 1; nodeB: '/bin/false "
                         "nodeB true' exited with status 1)"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
}

// A mistake in the train arguments' config is named before any host is asked: with hosts that
// do not answer it was reported only as "no answer from nodeA".
TEST(Launch, AConfigMistakeIsNamedBeforeAnyHostIsAsked) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "nodeA slots=4\n");
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--config " + dir.File("none.pbtxt"), "config file " + dir.File("none.pbtxt") + " does not exist"},
           {std::string(kJob) + " --set model.heads=3", "model.heads = 3: d_model (64) must be divisible by heads"}}) {
    const CommandResult r = RunPsformer("launch --hostfile " + hostfile + " -np 2 --rsh-agent /bin/false -- train " +
                                        flags + " --run-dir " + dir.File("run"));
    EXPECT_TRUE(EndsSaying(r, 1, says)) << r.output;
    EXPECT_EQ(r.output.find("no answer"), std::string::npos) << r.output;
  }
}

// An rsh agent that cannot run made every host look silent ("no answer from localhost"): it is
// named before any host is asked.
TEST(Launch, AnRshAgentThatCannotRunIsNamed) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "nodeA\n");
  const std::string train = " -- train " + std::string(kJob) + " --run-dir " + dir.File("run");
  testing::ExpectRefusedVariants("launch --hostfile " + hostfile + " -np 1 --rsh-agent ", train, 2,
                                 {
                                     {dir.File("missing"), "--rsh-agent " + dir.File("missing") + ": no such file"},
                                     {hostfile, "--rsh-agent " + hostfile + ": it is not executable"},
                                     {dir.path().string(), "it is a directory, not a program"},
                                     {"no-such-agent-anywhere", "no program of that name on PATH"},
                                 });
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
}

// A host that does not answer is passed over with a word, naming it and the hosts used instead.
TEST(Launch, ASilentHostPassedOverIsNamed) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "nodeA slots=3\nnodeB slots=3\n");
  const std::string agent = dir.Write("agent", "#!/bin/sh\n[ \"$1\" = nodeB ]\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  const CommandResult r = RunPsformer("launch --hostfile " + hostfile + " -np 3 --rsh-agent " + agent +
                                      " --dry-run -- train " + kJob + " --run-dir " + dir.File("run"));
  EXPECT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("no answer from nodeA: '" + agent + " nodeA true' exited with status 1; starting on nodeB"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("starting on nodeB"), std::string::npos) << r.output;
}

// An mpirun that cannot be run is named, and launch exits 1, one of its documented statuses
// (WEAK-ANSWERS L-17: it passed on the shell's 127). The agent runs the probe on this machine.
TEST(Launch, AnMpirunThatCannotRunIsNamedWithExitStatus1) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "localhost slots=3\n");
  const std::string agent = dir.Write("agent", "#!/bin/sh\nshift\nexec \"$@\"\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  const CommandResult r = RunPsformer("launch --hostfile " + hostfile + " -np 3 --rsh-agent " + agent + " --mpirun " +
                                      dir.File("no-mpirun") + " -- train " + kJob + " --run-dir " + dir.File("run"));
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("cannot run " + dir.File("no-mpirun") + ": No such file or directory"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the job failed before it started"), std::string::npos) << r.output;
}

// Stand-ins for mpirun (launch --mpirun): what a launch makes of how mpirun ended. Each writes the
// run's config.pbtxt (a job that started), counts its runs in RUN.count, then ends as told.
std::string FakeMpirun(const TempDir& dir, const std::string& name, const std::string& run, const std::string& end) {
  const std::string path = dir.Write(name, "#!/bin/sh\nmkdir -p '" + run + "' && touch '" + run +
                                               "/config.pbtxt'\necho run >> '" + run + ".count'\n" + end + "\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

std::string LaunchWith(const TempDir& dir, const std::string& mpirun, const std::string& run) {
  const std::string hostfile = dir.Write("hosts", "localhost slots=3\n");
  const std::string agent = dir.Write("agent", "#!/bin/sh\nshift\nexec \"$@\"\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  return "launch --hostfile " + hostfile + " -np 3 --rsh-agent " + agent + " --mpirun " + mpirun + " -- train " + kJob +
         " --run-dir " + run;
}

// mpirun that ends with status 0 but whose job wrote no model.bin did not train: no success.
TEST(Launch, AnMpirunThatSucceedsWithoutTheJobsModelIsNoSuccess) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = RunPsformer(LaunchWith(dir, FakeMpirun(dir, "mpirun-true", run, "exit 0"), run));
  EXPECT_TRUE(EndsSaying(r, 1, "mpirun exited with status 0, but the job wrote no " + run + "/model.bin"));
}

// Ranks stopped in order (someone signalled mpirun or them, as a batch system does) end mpirun
// with 130: a stop asked for, not a failure to restart.
TEST(Launch, AJobStoppedInOrderIsNotRestarted) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = RunPsformer(LaunchWith(dir, FakeMpirun(dir, "mpirun-130", run, "exit 130"), run));
  EXPECT_TRUE(EndsSaying(r, 130, "interrupted; not restarting")) << r.output;
  EXPECT_NE(r.output.find("the job was stopped: mpirun exited with status 130"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restart 1 of"), std::string::npos) << r.output;
  EXPECT_EQ(testing::ReadTextFile(run + ".count"), "run\n");
}

// A job that started and failed before its servers wrote any checkpoint: a restart would --resume
// from nothing and fail as a job that never started. Not restarted; what to do is said.
TEST(Launch, AJobLostBeforeItsFirstCheckpointIsNotRestartedWithResume) {
  TempDir dir;
  const std::string run = dir.File("run");
  const CommandResult r = RunPsformer(LaunchWith(dir, FakeMpirun(dir, "mpirun-fails", run, "exit 1"), run));
  EXPECT_TRUE(EndsSaying(r, 1,
                         "before its servers wrote any complete checkpoint: a restart would have nothing to "
                         "resume from; not restarting. Start over with the same psformer launch command and "
                         "--overwrite"))
      << r.output;
  EXPECT_EQ(testing::ReadTextFile(run + ".count"), "run\n");
}

// launch ends with the README's statuses, not mpirun's own (205, 213, 255: Open MPI's codes for
// its daemons' failures), which a user's script cannot tell from anything; mpirun's is named.
// The ranks' own usage error (2) passes through.
TEST(Launch, MpirunsOwnExitStatusesBecomeTheDocumentedOnes) {
  TempDir dir;
  const std::string run = dir.File("run");
  for (const auto& [mpirun_status, launch_status] : std::vector<std::pair<int, int>>{{213, 1}, {255, 1}, {2, 2}}) {
    const std::string never =
        dir.Write("mpirun-" + std::to_string(mpirun_status), "#!/bin/sh\nexit " + std::to_string(mpirun_status) + "\n");
    std::filesystem::permissions(never, std::filesystem::perms::owner_all);
    const CommandResult r = RunPsformer(LaunchWith(dir, never, run));
    EXPECT_TRUE(EndsSaying(r, launch_status, "the job failed before it started")) << mpirun_status << ": " << r.output;
    EXPECT_TRUE(testing::HasText(r.output, "status " + std::to_string(mpirun_status))) << r.output;
  }
  const CommandResult r = RunPsformer(LaunchWith(dir, FakeMpirun(dir, "mpirun-205", run, "exit 205"), run));
  EXPECT_TRUE(
      EndsSaying(r, 1, "--overwrite added to the train arguments (this attempt's logs are in " + run + "/logs)"))
      << r.output;
}

// What launch decides as each attempt ends is recorded in RUN/logs/launch.log, where `psformer
// status` shows it from another terminal: the restarts, and how the job ended; and between two
// attempts the job is being started again, not stopped (no "continue with ... --resume", which
// would race the launch for the run). Here the stand-in mpirun copies a real job's files in: the
// first time its checkpoints and not its model.bin, and fails (a job lost after a checkpoint:
// restarted); the second time it waits for RUN.go, then copies model.bin too.
TEST(Launch, ARestartAndTheEndAreRecordedWhereStatusShowsThem) {
  TempDir dir;
  const std::string real = dir.File("real");
  ASSERT_EQ(RunPsformer(std::string("train ") + kJob + " --run-dir " + real).exit_status, 0);
  const std::string run = dir.File("run");
  const std::string mpirun =
      FakeMpirun(dir, "mpirun-fails-once", run,
                 "cp '" + real + "/config.pbtxt' '" + run + "/'\n" +  //
                     "if [ -f '" + run + ".once' ]; then\n" +         //
                     "  for i in $(seq 600); do [ -f '" + run + ".go' ] && break; sleep 0.1; done\n" + "  cp '" + real +
                     "/model.bin' '" + run + "/'; exit 0\nfi\n" + "cp -r '" + real + "/checkpoints' '" + real +
                     "/logs' '" + real + "/metrics.jsonl' '" + run + "/'\n" + "touch '" + run + ".once'\nexit 1");
  BackgroundJob job(LaunchWith(dir, mpirun, run), dir.File("launch.out"));
  ASSERT_TRUE(WaitUntil(&job, std::chrono::seconds(60), [&] {
    return testing::ReadTextFile(run + ".count") == "run\nrun\n";
  })) << job.Output();
  const CommandResult between = RunPsformer("status " + run);
  EXPECT_EQ(between.exit_status, 0) << between.output;
  EXPECT_TRUE(testing::HasText(
      between.output, "): running (psformer launch, pid " + std::to_string(job.pid()) + ", is starting it again)"))
      << between.output;
  EXPECT_FALSE(testing::HasText(between.output, "continue with")) << between.output;
  testing::RunShell("touch '" + run + ".go'");
  ASSERT_EQ(job.Wait(std::chrono::seconds(60)), 0) << job.Output();
  EXPECT_TRUE(testing::HasText(job.Output(), "the job trained to its end and wrote " + run + "/model.bin"))
      << job.Output();
  const std::string log = testing::ReadTextFile(run + "/logs/launch.log");
  EXPECT_TRUE(testing::HasText(log, " UTC] restart 1 of 3: mpirun exited with status 1; starting again")) << log;
  const CommandResult status = RunPsformer("status " + run);
  EXPECT_EQ(status.exit_status, 0) << status.output;
  EXPECT_TRUE(testing::HasText(status.output, "): finished\n")) << status.output;
  EXPECT_TRUE(
      testing::HasText(status.output, "psformer launch restarted the job 1 time (" + run + "/logs/launch.log):"))
      << status.output;
  EXPECT_TRUE(testing::HasText(status.output, " UTC restart 1 of 3: mpirun exited with status 1")) << status.output;
  EXPECT_TRUE(testing::HasText(status.output, " UTC the job trained to its end and wrote " + run + "/model.bin"))
      << status.output;
}

// SIGUSR1 to launch (as the docs advise for mpirun) asks for the orderly stop, passed on to mpirun
// as SIGUSR1; before, its default action ended launch and left mpirun and the job unwatched.
TEST(Launch, Sigusr1ToLaunchStopsTheJobInOrder) {
  TempDir dir;
  const std::string run = dir.File("run");
  const std::string mpirun = FakeMpirun(
      dir, "mpirun-waits", run, "trap 'echo usr1 >> \"" + run + ".signals\"; exit 130' USR1\nsleep 60 &\nwait\nexit 1");
  BackgroundJob job(LaunchWith(dir, mpirun, run), dir.File("launch.out"));
  ASSERT_TRUE(WaitUntil(&job, std::chrono::seconds(60), [&] { return std::filesystem::exists(run + ".count"); }))
      << job.Output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the fake reaches its wait
  job.SignalGroup(SIGUSR1);
  EXPECT_EQ(job.Wait(std::chrono::seconds(60)), 130) << job.Output();
  EXPECT_EQ(testing::ReadTextFile(run + ".signals"), "usr1\n") << job.Output();
  EXPECT_EQ(job.Output().find("restart 1 of"), std::string::npos) << job.Output();
}

// A job that never starts (an rsh agent that answers the probe but hangs starting Open MPI's
// daemon; here an mpirun that waits and writes no config) is ended after --start-timeout, named;
// and a Ctrl-C while it still starts ends it within seconds, not never.
TEST(Launch, AJobThatNeverStartsIsEndedAfterTheStartTimeoutOrAStop) {
  TempDir dir;
  const std::string run = dir.File("run");
  const std::string hangs = dir.Write("mpirun-hangs", "#!/bin/sh\nsleep 120 &\nwait\n");
  std::filesystem::permissions(hangs, std::filesystem::perms::owner_all);
  const std::string launch = LaunchWith(dir, hangs, run);
  const CommandResult r =
      RunPsformer(launch.substr(0, launch.find(" -- ")) + " --start-timeout 2" + launch.substr(launch.find(" -- ")));
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("the job had not started 2 s after mpirun began (its daemons on localhost never all came "
                          "up"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the job failed before it started"), std::string::npos) << r.output;

  BackgroundJob job(launch, dir.File("launch.out"));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  job.SignalGroup(SIGINT);
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(job.Wait(std::chrono::seconds(60)), 130) << job.Output();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(40)) << job.Output();
  EXPECT_NE(job.Output().find("the job is still starting; it stops in order once it has, or is ended in 10 s"),
            std::string::npos)
      << job.Output();
}

// A TMPDIR that is not there would be made by Open MPI for its session files: named, nothing made.
TEST(Launch, ATmpdirThatIsNotThereIsNamedAndNotMade) {
  TempDir dir;
  const std::string missing = dir.File("no-such-tmp");
  const CommandResult r = RunShell("cd " + testing::SourceDir() + " && TMPDIR=" + missing + " " +
                                   testing::PsformerBinary() + " " + LaunchWith(dir, "mpirun", dir.File("run")));
  EXPECT_TRUE(EndsSaying(r, 1, "TMPDIR=" + missing + " is not a directory (it does not exist)")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST(Launch, IsListedAndHasHelp) {
  const CommandResult listed = RunPsformer("--help");
  EXPECT_NE(listed.output.find("  launch"), std::string::npos) << listed.output;
  const CommandResult help = RunPsformer("launch --help");
  EXPECT_TRUE(EndsSaying(help, 0, "usage: psformer launch --hostfile FILE --np N"));
  EXPECT_NE(help.output.find("--max-restarts"), std::string::npos) << help.output;
}

TEST(Launch, UsageErrorsSayWhatIsMissing) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "nodeA\n");
  const CommandResult no_train = RunPsformer("launch --hostfile " + hostfile + " -np 1");
  EXPECT_TRUE(EndsSaying(no_train, 2, "after -- comes the train command"));
  const CommandResult no_run_dir =
      RunPsformer("launch --hostfile " + hostfile + " -np 1 -- train --config configs/copy.pbtxt");
  EXPECT_TRUE(EndsSaying(no_run_dir, 2, "the train arguments need --run-dir"));
  const CommandResult bad_hostfile =
      RunPsformer("launch --hostfile " + dir.Write("bad", "nodeA cores=2\n") + " -np 1 -- train --config " +
                  "configs/copy.pbtxt --run-dir " + dir.File("run"));
  EXPECT_TRUE(EndsSaying(
      bad_hostfile, 1,
      "psformer launch: error: " + dir.File("bad") + ":1: \"cores=2\": expected slots=N after the host name"));
  const CommandResult no_dashes = RunPsformer("launch --hostfile " + hostfile +
                                              " -np 1 train --config configs/copy.pbtxt --run-dir " + dir.File("run"));
  EXPECT_TRUE(EndsSaying(no_dashes, 2, "the train command must follow -- after launch's own options"));
  const CommandResult directory =
      RunPsformer("launch --hostfile " + dir.path().string() +
                  " -np 1 -- train --config configs/copy.pbtxt --run-dir " + dir.File("run"));
  EXPECT_TRUE(EndsSaying(directory, 1, "hostfile " + dir.path().string() + " is a directory"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
  // --network: what Open MPI's *_if_include takes, checked before anything starts.
  const std::string train = " -- train --config configs/copy.pbtxt --run-dir " + dir.File("run");
  testing::ExpectRefusedVariants("launch --hostfile " + hostfile + " -np 1 --network ", train, 2,
                                 {
                                     {"10.1.0.0/33", "'10.1.0.0/33': the prefix length must be 0 to 32"},
                                     {"10.1.300.0/16", "'10.1.300.0/16': '300' is not an octet (0 to 255)"},
                                     {"10.1.0/16", "four octets"},
                                     {"10.1.0.0", "'10.1.0.0' is not a CIDR network"},
                                     {"eth0,", "it names no network"},
                                     {"'eth 0'", "nor an interface name"},
                                     {"''", "--network is empty"},
                                 });
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
  // A good one gets past the check (and then stops at the unreachable host, as before).
  const CommandResult good =
      RunPsformer("launch --hostfile " + hostfile + " -np 2 --network 10.1.0.0/16,ib0 --dry-run" + train);
  EXPECT_EQ(good.output.find("--network"), std::string::npos) << good.output;
}

// A rank count that does not fit the config's roles is named before any host is asked; every
// rank used to say it once mpirun had started them.
TEST(Launch, ARankCountThatDoesNotFitTheConfigIsNamedFirst) {
  TempDir dir;
  const std::string hostfile = dir.Write("hosts", "nodeA slots=4\n");
  const std::string launch = "launch --hostfile " + hostfile + " --rsh-agent /bin/false -np ";
  const std::string train = " -- train --config configs/copy.pbtxt --run-dir " + dir.File("run");
  CommandResult r = RunPsformer(launch + "3" + train);
  EXPECT_TRUE(EndsSaying(r, 2,
                         "psformer launch: error: -np 3 does not fit the config: it needs cluster.servers (1) + "
                         "cluster.workers (1) = 2 ranks; pass -np 2, or change the config with --set"));
  EXPECT_EQ(r.output.find("no answer"), std::string::npos) << r.output;
  r = RunPsformer(launch + "1" + train + " --set cluster.workers=0");
  EXPECT_TRUE(EndsSaying(r, 2,
                         "-np 1 leaves no rank for a worker: with cluster.workers = 0 every rank beside the "
                         "cluster.servers (1) is one; pass -np 2 or more"));
  // Past the check, the hosts are asked (and this one does not answer).
  r = RunPsformer(launch + "4" + train + " --set cluster.workers=0");
  EXPECT_TRUE(EndsSaying(r, 1, "no answer from nodeA"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
}

}  // namespace
}  // namespace psformer
