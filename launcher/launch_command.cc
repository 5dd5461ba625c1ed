// `psformer launch`: runs `psformer train` on a cluster under mpirun, and keeps it running. It
// chooses the hosts of the hostfile that answer, builds and prints the mpirun command line, runs
// it, and when the job ends abnormally (a host lost, mpirun failing before the job finished) it
// starts the job again with --resume from the newest complete checkpoint, on the hosts that
// still answer plus spares from the hostfile, so that the number of ranks, and so the roles and
// the BSP weights, stay the same. Ctrl-C stops the job and is not restarted.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/clock_text.h"
#include "common/config_loader.h"
#include "common/supervisor_report.h"
#include "launcher/cluster_plan.h"
#include "launcher/command_line.h"
#include "launcher/host_probe.h"
#include "launcher/hostfile.h"
#include "launcher/mpirun_command.h"
#include "launcher/role_supervisor.h"
#include "launcher/run_status.h"
#include "launcher/supervisor_events.h"
#include "launcher/watched_mpirun.h"

extern char** environ;

namespace psformer {
namespace {

namespace fs = std::filesystem;

struct LaunchOptions {
  std::string hostfile;
  int processes = 0;
  int max_restarts = 3;
  std::string rsh_agent;
  std::string network;
  std::string mpirun = "mpirun";
  std::chrono::milliseconds host_timeout{30000};
  std::chrono::milliseconds start_timeout{300000};  // --start-timeout
  bool dry_run = false;
  std::vector<std::string> train_args;  // "train" and its arguments
  std::string run_dir;                  // the train's --run-dir
};

// The value of option `name` in `args` ("--name VALUE" or "--name=VALUE"), every occurrence.
std::vector<std::string> OptionValues(const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> values;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name && i + 1 < args.size())
      values.push_back(args[++i]);
    else if (args[i].rfind(name + "=", 0) == 0)
      values.push_back(args[i].substr(name.size() + 1));
  }
  return values;
}

bool HasFlag(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

std::string Now() { return ClockText(std::time(nullptr), "%H:%M:%S", TimeZone::kUtc); }

// False when the console is gone (a `| tee` the same Ctrl-C ended, a closed terminal).
bool Say(const std::string& line) {
  return static_cast<bool>(std::cerr << "psformer launch: [" << Now() << "] " << line << std::endl);
}

// Says `line`, and appends it to RUN_DIR/logs/launch.log (kLaunchLogPrefix, a dated stamp), where
// `psformer status` finds how each attempt ended and what launch did about it (a restart, giving
// up). Only what launch decides once a job ran is recorded: the run directory is then there, and
// the one this job writes (an --overwrite has cleared it). Nothing is made that is not there.
void SayAndRecord(const std::string& run_dir, const std::string& line) {
  Say(line);
  std::error_code ec;
  const fs::path logs = fs::path(run_dir) / "logs";
  if (!fs::is_directory(logs, ec)) return;
  std::ofstream log(logs / "launch.log", std::ios::app);
  log << kLaunchLogPrefix << "[" << ClockText(std::time(nullptr), "%Y-%m-%d %H:%M:%S UTC", TimeZone::kUtc) << "] "
      << line << "\n";
  if (!log.flush()) Say("warning: cannot append to " + (logs / "launch.log").string() + ": " + std::strerror(errno));
}

// What is wrong with `program` as a program to run (a path, or a name looked up on PATH), or "".
// An agent that cannot run makes every host look silent ("no answer from localhost"), which
// names the wrong culprit.
std::string ProgramProblem(const std::string& program) {
  auto check = [](const fs::path& path) -> std::string {
    std::error_code ec;
    if (!fs::exists(path, ec)) return "no such file";
    if (fs::is_directory(path, ec)) return "it is a directory, not a program";
    if (access(path.c_str(), X_OK) != 0) return "it is not executable";
    return "";
  };
  if (program.find('/') != std::string::npos) return check(program);
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && check(fs::path(dir) / program).empty()) return "";
  }
  return "no program of that name on PATH";
}

// What the ranks need beyond the user's arguments: servers reachable from other hosts. A
// config that keeps them on loopback (the single-node default) gets bind_host 0.0.0.0, and
// workers then reach the servers by host name (docs/security.md: CURVE guards the ports).
std::vector<std::string> TrainArguments(const LaunchOptions& options, const JobConfig& config, size_t host_count) {
  std::vector<std::string> args = options.train_args;
  if (host_count > 1 && config.cluster().bind_host().rfind("127.", 0) == 0) {
    args.insert(args.end(), {"--set", "cluster.bind_host=0.0.0.0"});
  }
  return args;
}

// The train arguments' config, resolved and checked here before any host is asked: a mistake in
// it is named at once, not after the probes (or as a host that did not answer).
StatusOr<JobConfig> LaunchConfig(const LaunchOptions& options) {
  const std::vector<std::string> configs =
      OptionValues(options.train_args, "--config");  // not empty (RunLaunchCommand)
  PSF_ASSIGN_OR_RETURN(JobConfig config, ResolveConfig(configs.back(), OptionValues(options.train_args, "--set")));
  if (options.max_restarts > 0 && !WritesCheckpoints(config)) {
    Say("warning: the config writes no periodic checkpoint (checkpoint.every_steps, every_minutes): a restart "
        "starts the training again from step 0");
  }
  return config;
}

// What is wrong with -np for the config's roles, or "": said here, before any host is asked,
// rather than by every rank once mpirun has started them (ClusterPlan::CheckRanks).
std::string RankCountProblem(int ranks, const JobConfig& config) {
  const int servers = config.cluster().servers();
  const int workers = config.cluster().workers();
  if (ClusterPlan::RanksFit(ranks, servers, workers)) return "";
  const std::string np = "-np " + std::to_string(ranks);
  if (workers == 0) {
    return np + " leaves no rank for a worker: with cluster.workers = 0 every rank beside the cluster.servers (" +
           std::to_string(servers) + ") is one; pass -np " + std::to_string(servers + 1) + " or more";
  }
  return np + " does not fit the config: it needs cluster.servers (" + std::to_string(servers) +
         ") + cluster.workers (" + std::to_string(workers) + ") = " + std::to_string(servers + workers) +
         " ranks; pass -np " + std::to_string(servers + workers) + ", or change the config with --set";
}

// Whether the run's file `name` was written at `since` or later (by this attempt's job).
bool RunFileWrittenSince(const std::string& run_dir, const char* name, std::time_t since) {
  struct stat info;
  const std::string path = (fs::path(run_dir) / name).string();
  return stat(path.c_str(), &info) == 0 && info.st_mtime >= since;
}

// Whether this attempt's job got as far as writing its run directory (the bootstrap passed the
// launch checks); a job refused before that would be refused again.
bool JobStarted(const std::string& run_dir, std::time_t since) {
  return RunFileWrittenSince(run_dir, "config.pbtxt", since);
}

// Whether this attempt's job trained to its end (wrote RUN_DIR/model.bin): what failed after that
// (a checkpoint its servers could not write) no restart mends, and would cost the steps since the
// newest checkpoint again, each time.
bool JobTrainedToItsEnd(const std::string& run_dir, std::time_t since) {
  return RunFileWrittenSince(run_dir, "model.bin", since);
}

// --network as Open MPI's *_if_include takes it: comma-separated CIDR networks (a.b.c.d/n) or
// interface names. Empty when it is one; else what is wrong with it.
std::string CidrProblem(const std::string& item) {
  const size_t slash = item.find('/');
  if (slash == std::string::npos) return "'" + item + "' is not a CIDR network (a.b.c.d/n, e.g. 10.1.0.0/16)";
  int octets = 0;
  std::string part;
  const auto number = [](const std::string& digits, int max) {
    if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    const int v = std::stoi(digits);
    return v <= max ? v : -1;
  };
  std::stringstream address(item.substr(0, slash));
  while (std::getline(address, part, '.')) {
    if (number(part, 255) < 0) return "'" + item + "': '" + part + "' is not an octet (0 to 255)";
    ++octets;
  }
  if (octets != 4) return "'" + item + "' is not a CIDR network (a.b.c.d/n: four octets)";
  if (number(item.substr(slash + 1), 32) < 0) return "'" + item + "': the prefix length must be 0 to 32";
  return "";
}

std::string NetworkProblem(const std::string& network) {
  if (network.empty() || network.back() == ',') return "it names no network (CIDR a.b.c.d/n or an interface name)";
  std::stringstream in(network);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) return "an empty entry between commas";
    if (std::isdigit(static_cast<unsigned char>(item[0])) || item.find('/') != std::string::npos) {
      if (std::string problem = CidrProblem(item); !problem.empty()) return problem;
      continue;
    }
    const bool name_like =
        item.size() <= 15 && std::isalpha(static_cast<unsigned char>(item[0])) &&
        std::all_of(item.begin(), item.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '-';
        });
    if (!name_like) {
      return "'" + item.substr(0, 40) + (item.size() > 40 ? "..." : "") +
             "' is neither a CIDR network (a.b.c.d/n) nor an interface name (eth0, ib0, ...)";
    }
  }
  return "";
}

std::string Names(const std::vector<HostSlots>& hosts) {
  std::string names;
  for (const HostSlots& h : hosts) names += (names.empty() ? "" : ",") + h.host;
  return names;
}

// The mpirun command that starts this very psformer's `train` (arguments `train`) on `chosen`,
// with this process's environment forwarded as EnvironmentToForward selects.
std::vector<std::string> MpirunCommandLine(const LaunchOptions& options, const std::vector<HostSlots>& chosen,
                                           const std::vector<std::string>& train) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.push_back(*e);
  MpirunOptions mpirun;
  mpirun.mpirun = options.mpirun;
  mpirun.processes = options.processes;
  mpirun.hosts = chosen;
  mpirun.as_root = geteuid() == 0;
  mpirun.rsh_agent = options.rsh_agent;
  mpirun.network = options.network;
  mpirun.forward_environment = EnvironmentToForward(environment);
  mpirun.program = {len > 0 ? std::string(self, len) : "psformer"};
  mpirun.program.insert(mpirun.program.end(), train.begin(), train.end());
  return BuildMpirunCommand(mpirun);
}

// launch's status for a job that failed, given mpirun's: one of the README's. mpirun passes on
// the first failing rank's status, which is ours where it is a usage error or a machine that
// refused a thread or memory; its own (127: it could not be run, 205, 213, 255, ...) name
// nothing a script of the user's could act on, and are a failure while running.
int FailedJobStatus(int mpirun_status) {
  return mpirun_status == kExitUsage || mpirun_status == kExitOutOfResources ? mpirun_status : kExitFailure;
}

// After Ctrl-C, SIGTERM (or SIGHUP: `hung_up`): how to continue the job, or, with no complete
// checkpoint, that there is nothing to continue and how to start over.
// Said on the console and recorded in RUN_DIR/logs/launch.log.
void SayHowToContinue(const std::string& run_dir, bool hung_up) {
  const std::string newest = NewestCompleteCheckpoint(run_dir);
  const std::string how = hung_up ? "hung up" : "interrupted";
  const std::string advice =
      newest.empty()
          ? how +
                "; not restarting. No complete checkpoint was written (the job was killed before its servers "
                "wrote one, or stopped before it began): nothing to resume; start over with "
                "the same psformer launch command and --overwrite added to the train arguments"
          : how +
                "; not restarting. Continue with the same psformer launch command and --resume "
                "added to the train arguments (newest complete checkpoint: " +
                newest + ")";
  SayAndRecord(run_dir, advice);
}

int Launch(const LaunchOptions& options) {
  auto hosts = ReadHostfile(options.hostfile);
  if (!hosts.ok()) return ReportError("launch", hosts.status());
  const auto config = LaunchConfig(options);
  if (!config.ok()) return ReportError("launch", config.status());
  if (const std::string ranks = RankCountProblem(options.processes, *config); !ranks.empty()) {
    return ReportError("launch", ranks, kExitUsage);
  }
  std::vector<std::string> names;
  for (const HostSlots& h : *hosts) names.push_back(h.host);
  HostProbeOptions probe;
  probe.rsh_agent = options.rsh_agent;
  probe.timeout = std::min<std::chrono::milliseconds>(std::chrono::seconds(10), options.host_timeout / 2);
  if (probe.timeout.count() <= 0) probe.timeout = std::chrono::seconds(10);

  std::string previous_hosts;
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> why;
    const std::vector<bool> answers = ProbeHosts(names, probe, &why);
    auto chosen = SelectHosts(*hosts, answers, options.processes, why);
    if (!chosen.ok()) return ReportError("launch", chosen.status());
    if (attempt == 0 && std::find(answers.begin(), answers.end(), false) != answers.end()) {
      // A silent host before those that hold the job would otherwise be passed over without a word.
      Say("no answer from " + SilentHosts(names, answers, why) + "; starting on " + Names(*chosen));
    }
    std::vector<std::string> train = TrainArguments(options, *config, chosen->size());
    if (attempt > 0 && !HasFlag(train, "--resume")) train.push_back("--resume");
    if (attempt > 0 && !HasFlag(train, "--wait-for-run-dir")) {
      // The ended job's ranks on a host that was cut off learn it only when they reach mpirun
      // again, then stop in order: the new rank 0 waits for their lock (run_lock.h) that long.
      const auto stop = kWorkerStopTimeout + kServerStopTimeout + std::chrono::seconds(30);
      train.insert(train.end(), {"--wait-for-run-dir", std::to_string(stop.count())});
    }
    const std::vector<std::string> command = MpirunCommandLine(options, *chosen, train);
    if (previous_hosts != Names(*chosen) && !previous_hosts.empty()) {
      Say("hosts now " + Names(*chosen) + " (were " + previous_hosts + "; no answer from " +
          SilentHosts(names, answers, why) + ")");
    }
    previous_hosts = Names(*chosen);
    std::cout << "psformer launch: " << ShellQuote(command) << std::endl;
    if (options.dry_run) return 0;

    WatchedMpirunOptions watched;
    watched.command = command;
    for (const HostSlots& h : *chosen) watched.hosts.push_back(h.host);
    watched.probe = probe;
    watched.host_timeout = options.host_timeout;
    watched.start_timeout = options.start_timeout;
    watched.console_gone_log = (fs::path(options.run_dir) / "logs" / "launch.log").string();
    const std::time_t started = std::time(nullptr);
    watched.job_started = [&] { return JobStarted(options.run_dir, started); };
    const WatchedMpirunResult result = RunWatchedMpirun(watched);
    if (result.interrupted) {
      // mpirun's own status after a Ctrl-C is its abort's (1), whatever the ranks did: the
      // command was interrupted, and says so by 130 like train (129 after SIGHUP).
      SayHowToContinue(options.run_dir, result.hung_up);
      return result.hung_up ? kExitHangup : kExitInterrupted;
    }
    if (result.exit_status == 0) {
      if (JobTrainedToItsEnd(options.run_dir, started)) {
        SayAndRecord(options.run_dir,
                     "the job trained to its end and wrote " + (fs::path(options.run_dir) / "model.bin").string());
        return 0;
      }
      // mpirun said success, but no job wrote the run's model (an --mpirun that is no Open MPI
      // mpirun, a train command its ranks did not run): no success to report.
      Say("mpirun exited with status 0, but the job wrote no " + (fs::path(options.run_dir) / "model.bin").string() +
          ": it did not train (see above)");
      return kExitFailure;
    }
    if (result.exit_status == kExitInterrupted || result.exit_status == kExitHangup) {
      // The ranks stopped in order, as they do when someone signals mpirun or them directly (a
      // batch system, `kill -USR1`): a stop someone asked for, not a failure to mend.
      SayAndRecord(options.run_dir, "the job was stopped: mpirun exited with status " +
                                        std::to_string(result.exit_status) + ", as the ranks do when asked to stop");
      SayHowToContinue(options.run_dir, result.exit_status == kExitHangup);
      return result.exit_status;
    }
    if (!JobStarted(options.run_dir, started)) {
      Say("the job failed before it started (" + result.cause + "; see above); not restarting");
      return FailedJobStatus(result.exit_status);
    }
    if (JobTrainedToItsEnd(options.run_dir, started)) {
      SayAndRecord(options.run_dir, "the job trained to its end and wrote " +
                                        (fs::path(options.run_dir) / "model.bin").string() +
                                        ", but ended with an error (see above); not restarting");
      return FailedJobStatus(result.exit_status);
    }
    if (NewestCompleteCheckpoint(options.run_dir).empty()) {
      // A restart continues with --resume, which has nothing to continue from: it would fail as a
      // job that never started, and say so wrongly.
      SayAndRecord(
          options.run_dir,
          "the job ended abnormally (" + result.cause +
              ") before its servers wrote any complete checkpoint: a restart would have nothing to resume from; not "
              "restarting. Start over with the same psformer launch command and --overwrite added to the train "
              "arguments (this attempt's logs are in " +
              (fs::path(options.run_dir) / "logs").string() + ")");
      return FailedJobStatus(result.exit_status);
    }
    if (attempt >= options.max_restarts) {
      SayAndRecord(options.run_dir, "the job ended abnormally (" + result.cause + ") and --max-restarts " +
                                        std::to_string(options.max_restarts) +
                                        " are used up; giving up. Continue it with --resume");
      return FailedJobStatus(result.exit_status);
    }
    // The pid lets `psformer status` say that this launch is starting the job again, not that
    // it stopped (kLaunchRestartPid).
    const std::string restart = "restart " + std::to_string(attempt + 1) + " of " +
                                std::to_string(options.max_restarts) + ": " + result.cause +
                                "; starting again with --resume from the newest complete checkpoint" +
                                kLaunchRestartPid + std::to_string(getpid()) + ")";
    SayAndRecord(options.run_dir, restart);
    // Beside the roles' restarts in TensorBoard, where the job writes its event files.
    SupervisorEvents(options.run_dir, fs::is_directory(fs::path(options.run_dir) / "tensorboard"))
        .Note("psformer launch: " + restart);
  }
}

}  // namespace

int RunLaunchCommand(const Args& all_args) {
  KeepRunningWhenTheConsoleCloses();
  // Everything after "--" is the train command; the options before it are launch's own.
  const auto dashes = std::find(all_args.begin(), all_args.end(), "--");
  const Args args(all_args.begin(), dashes);
  LaunchOptions launch;
  if (dashes != all_args.end()) launch.train_args.assign(dashes + 1, all_args.end());
  if (dashes == all_args.end() && std::find(args.begin(), args.end(), "train") != args.end()) {
    return ReportError("launch",
                       "the train command must follow -- after launch's own options: psformer launch " +
                           std::string("--hostfile FILE --np N -- train --config FILE --run-dir DIR ..."),
                       kExitUsage);
  }

  po::options_description options("launch options");
  double host_timeout_s = 30, start_timeout_s = 300;
  // clang-format off
  options.add_options()
      ("hostfile", po::value<std::string>(&launch.hostfile)->required(),
       "hosts, one a line: HOST [slots=N] (Open MPI's format); those after the first that hold -np are spares")
      ("np", po::value<int>(&launch.processes)->required(),
       "ranks: cluster.servers + cluster.workers of the job")
      ("max-restarts", po::value<int>(&launch.max_restarts)->default_value(3),
       "restart an abnormally ended job at most this many times (0 = never)")
      ("host-timeout", po::value<double>(&host_timeout_s)->default_value(30),
       "seconds a host of the job may stay silent before it counts as lost (0 = do not watch)")
      ("start-timeout", po::value<double>(&start_timeout_s)->default_value(300),
       "seconds the job may take to start on every host (its ranks all in MPI) before the launch ends it "
       "(0 = wait for ever)")
      ("rsh-agent", po::value<std::string>(&launch.rsh_agent),
       "program mpirun reaches hosts with instead of ssh (--mca plm_rsh_agent)")
      ("network", po::value<std::string>(&launch.network),
       "network for Open MPI's own traffic, CIDR or interface (oob/btl_tcp_if_include)")
      ("mpirun", po::value<std::string>(&launch.mpirun)->default_value("mpirun"), "the mpirun to run")
      ("dry-run", po::bool_switch(&launch.dry_run), "choose the hosts, print the mpirun line and exit");
  // clang-format on
  const std::string usage = "--hostfile FILE --np N [--max-restarts K] -- train --config FILE --run-dir DIR ...";
  // Open MPI spells the rank count -np; so may this command.
  Args normalized = args;
  for (std::string& a : normalized) {
    if (a == "-np") a = "--np";
  }
  ParsedOptions parsed = ParseOptions("launch", usage, normalized, options);
  if (parsed.exit_status) return *parsed.exit_status;
  if (launch.processes < 1)
    return ReportError("launch", "-np " + std::to_string(launch.processes) + ": need at least 1 rank", kExitUsage);
  if (launch.max_restarts < 0) return ReportError("launch", "--max-restarts must be 0 or more", kExitUsage);
  // !(x >= 0) also refuses nan, which every comparison would let through.
  if (!(host_timeout_s >= 0) || !std::isfinite(host_timeout_s)) {
    return ReportError("launch", "--host-timeout must be 0 or more seconds (a finite number)", kExitUsage);
  }
  launch.host_timeout = std::chrono::milliseconds(static_cast<int64_t>(host_timeout_s * 1000));
  if (!(start_timeout_s >= 0) || !std::isfinite(start_timeout_s)) {
    return ReportError("launch", "--start-timeout must be 0 or more seconds (a finite number)", kExitUsage);
  }
  launch.start_timeout = std::chrono::milliseconds(static_cast<int64_t>(start_timeout_s * 1000));
  // Open MPI makes its session directories under TMPDIR, and creates a TMPDIR that is not there:
  // a mistyped one would become a directory of its own outside anything the job owns.
  if (const char* tmpdir = std::getenv("TMPDIR"); tmpdir != nullptr && *tmpdir != '\0') {
    std::error_code ec;
    if (!fs::is_directory(tmpdir, ec)) {
      return ReportError("launch", std::string("TMPDIR=") + tmpdir + " is not a directory (" +
                                       (fs::exists(tmpdir, ec) ? "a file" : "it does not exist") +
                                       "): Open MPI would make it for its session files; create it, or unset TMPDIR");
    }
  }
  if (parsed.values.count("rsh-agent")) {
    if (const std::string problem = ProgramProblem(launch.rsh_agent); !problem.empty()) {
      return ReportError("launch", "--rsh-agent " + launch.rsh_agent + ": " + problem, kExitUsage);
    }
  }
  if (parsed.values.count("network")) {
    if (const std::string problem = NetworkProblem(launch.network); !problem.empty()) {
      return ReportError("launch", "--network " + launch.network.substr(0, 80) + ": " + problem, kExitUsage);
    }
  }
  if (launch.train_args.empty() || launch.train_args.front() != "train") {
    return ReportError("launch", "after -- comes the train command: -- train --config FILE --run-dir DIR ...",
                       kExitUsage);
  }
  const std::vector<std::string> run_dirs = OptionValues(launch.train_args, "--run-dir");
  if (run_dirs.empty()) {
    return ReportError("launch", "the train arguments need --run-dir: a restart continues the run in it", kExitUsage);
  }
  if (OptionValues(launch.train_args, "--config").empty()) {
    return ReportError("launch", "the train arguments have no --config: -- train --config FILE --run-dir DIR ...",
                       kExitUsage);
  }
  if (Status checked = CheckOverrides(OptionValues(launch.train_args, "--set")); !checked.ok()) {
    return ReportError("launch", checked, kExitUsage);
  }
  launch.run_dir = run_dirs.back();
  const int status = Launch(launch);
  return launch.dry_run ? status : JobExitStatus(status);
}

}  // namespace psformer
