#include "launcher/run_status.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>

#include "common/checkpoint/checkpoint_store.h"
#include "common/config_loader.h"
#include "common/duration_text.h"
#include "common/line_reader.h"
#include "common/metrics_log.h"
#include "common/model_file.h"
#include "launcher/run_lock.h"
#include "launcher/supervisor_log.h"
#include "pserver/server/shard_checkpointer.h"
#include "worker/train/trainer_state.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string HostName() {
  char host[256] = {};
  return gethostname(host, sizeof(host) - 1) == 0 ? host : "localhost";
}

// Whether `pid` is a live (not zombie) process of this machine running psformer on `run_dir`.
bool RunsOn(int64_t pid, const fs::path& run_dir) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const std::string stat = ReadFile(proc + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') return false;
  const std::string cmdline = ReadFile(proc + "/cmdline");
  std::vector<std::string> args;
  std::istringstream in(cmdline);
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  std::error_code ec;
  const fs::path cwd = fs::read_symlink(proc + "/cwd", ec);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--run-dir") continue;
    fs::path dir = args[i + 1];
    if (dir.is_relative() && !ec) dir = cwd / dir;
    return fs::weakly_canonical(dir, ec) == fs::weakly_canonical(run_dir, ec);
  }
  return false;
}

// Follows one supervisor log through the life of each of its role processes.
void ApplySupervisorLogLine(const std::string& line, const std::string& supervisor, const std::string& host,
                            std::vector<RoleStatus>* roles) {
  const std::optional<RoleLogEvent> event = ParseSupervisorLogLine(line);
  if (!event) return;
  auto it = std::find_if(roles->begin(), roles->end(), [&](const RoleStatus& r) { return r.name == event->role; });
  if (it == roles->end()) {
    RoleStatus role;
    role.name = event->role;
    role.supervisor = supervisor;
    role.host = host;
    roles->push_back(role);
    it = roles->end() - 1;
  }
  switch (event->kind) {
    case RoleLogEvent::Kind::kStarted:
      it->host = host;  // a restarted launch may have placed the rank elsewhere
      it->pid = event->pid;
      it->incarnation = event->incarnation;
      it->state = "running";
      break;
    case RoleLogEvent::Kind::kFinished:
      it->state = "finished";
      break;
    case RoleLogEvent::Kind::kRestarting:
      it->state = "restarting";
      it->last_exit = event->detail;
      break;
    case RoleLogEvent::Kind::kFailed:
      it->state = "failed";
      it->last_exit = event->detail;
      break;
    case RoleLogEvent::Kind::kOther:
      break;
  }
}

// A line of launch.log that launch wrote itself ("psformer launch: [STAMP] TEXT"; run_status.h).
void ApplyLaunchLogLine(const std::string& line, RunStatus* status) {
  const std::string opening = std::string(kLaunchLogPrefix) + "[";
  const size_t close = line.find("] ");
  if (line.rfind(opening, 0) != 0 || close == std::string::npos) return;
  const std::string text = line.substr(close + 2);
  status->launch_events.push_back(line.substr(opening.size(), close - opening.size()) + " " + text);
  status->launch_pid = -1;  // a later line: that launch went on, or ended
  if (text.rfind("restart ", 0) != 0) return;
  ++status->launch_restarts;
  const size_t pid = text.rfind(kLaunchRestartPid);
  if (pid == std::string::npos) return;
  const std::string digits = text.substr(pid + std::strlen(kLaunchRestartPid));
  char* end = nullptr;
  const long long value = std::strtoll(digits.c_str(), &end, 10);
  if (end != digits.c_str() && *end == ')' && value > 0) status->launch_pid = value;
}

// A log line "L YYYY-MM-DD HH:MM:SS.mmm TAG] MESSAGE" of level W or E: the newest (by its stamp,
// which orders lines across files) becomes the status's last problem.
void NoteProblem(const std::string& line, std::string* newest_stamp, std::string* last_problem) {
  if (line.size() < 27 || (line[0] != 'W' && line[0] != 'E') || line[1] != ' ') return;
  const std::string stamp = line.substr(2, 23);
  if (stamp < *newest_stamp) return;
  *newest_stamp = stamp;
  const size_t bracket = line.find("] ");
  const std::string tag = line.substr(26, line.find(' ', 26) - 26);
  *last_problem =
      stamp.substr(11, 8) + " " + tag + ": " + (bracket == std::string::npos ? line : line.substr(bracket + 2));
}

// The host of a rank's supervisor log line that says where the rank runs ("] rank 2 runs
// pserver-0 on host node1; ..."; job_runner.cc), or "".
std::string RankHost(const std::string& line) {
  constexpr std::string_view kOnHost = " on host ";
  const size_t rank = line.find("] rank ");
  if (rank == std::string::npos) return "";
  const size_t on = line.find(kOnHost, rank);
  if (on == std::string::npos || line.find(" runs ", rank) > on) return "";
  const size_t begin = on + kOnHost.size();
  return line.substr(begin, line.find(';', begin) - begin);
}

// Reads the logs in logs/: the roles from the supervisors' logs, the newest problem from all.
void ReadLogs(const fs::path& dir, RunStatus* status) {
  std::vector<fs::path> logs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "logs", ec)) {
    if (entry.path().extension() == ".log") logs.push_back(entry.path());
  }
  std::sort(logs.begin(), logs.end());
  std::string newest_problem_stamp;
  for (const fs::path& log : logs) {
    const std::string stem = log.stem().string();
    const bool single_node = stem == "supervisor", rank = stem.rfind("supervisor-", 0) == 0;
    LineReader reader(log.string());
    // Under mpirun, the host the rank's log says it runs on (each attempt of a launch says anew).
    std::string rank_host;
    for (std::string line; reader.Next(&line);) {
      if (rank) {
        if (std::string host = RankHost(line); !host.empty()) rank_host = std::move(host);
      }
      if (single_node || rank) ApplySupervisorLogLine(line, stem, single_node ? HostName() : rank_host, &status->roles);
      if (stem == "launch") ApplyLaunchLogLine(line, status);
      NoteProblem(line, &newest_problem_stamp, &status->last_problem);
    }
    status->unreadable.insert(status->unreadable.end(), reader.too_long().begin(), reader.too_long().end());
    if (!reader.status().ok()) status->unreadable.push_back(reader.status().message());
  }
}

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0.0 : it->second;
}

}  // namespace

StatusOr<RunStatus> ReadRunStatus(const std::string& run_dir, bool verify) {
  const fs::path dir(run_dir);
  const fs::path config_path = dir / "config.pbtxt";
  std::error_code missing;
  if (!fs::exists(dir, missing)) return Status::NotFound(run_dir + " does not exist");
  if (!fs::is_directory(dir)) return Status::NotFound(run_dir + " is not a directory");
  if (!fs::exists(config_path) || !fs::is_directory(dir / "logs")) {
    return Status::NotFound(run_dir + " is not a run directory (it has no config.pbtxt and logs/; " +
                            "psformer train --run-dir DIR makes one)");
  }
  // As `train --resume` reads it: a config it would refuse (emptied, edited wrong) is named here,
  // not read as the defaults it leaves.
  PSF_ASSIGN_OR_RETURN(const proto::JobConfig config, ResolveConfig(config_path.string(), {}));
  RunStatus status;
  status.run_dir = run_dir;
  status.name = config.name();
  status.max_steps = config.training().max_steps();
  status.every_steps = std::max(1, config.logging().every_steps());
  status.checkpoints_configured = WritesCheckpoints(config);

  ReadLogs(dir, &status);
  std::error_code ec;
  status.local = status.roles.empty() && fs::exists(dir / "logs" / "trainer.log", ec);
  status.trainer_state = fs::exists(dir / "trainer_state.bin", ec);
  status.verified = verify;
  if (status.trainer_state) {
    // Its size and header only, as checkpoints are checked here (the CRC is --resume's to check),
    // unless asked to verify.
    const std::string path = (dir / "trainer_state.bin").string();
    const Status whole = verify ? ReadTrainerState(path).status() : CheckTrainerStateFile(path);
    if (!whole.ok()) status.trainer_state_damage = whole.message();
  }
  // The local trainer has no roles to look for: it is alive while it holds the run's lock.
  bool alive = status.local && !RunLock::Holder(run_dir).empty();
  const std::string here = HostName();
  bool unseen = false;  // a role of another host is kNotSeen
  for (RoleStatus& role : status.roles) {
    const bool runs = role.pid > 0 && RunsOn(role.pid, dir);
    if (runs) {
      role.state = "running";
      alive = true;
    } else if (role.state == "running") {
      // Another host's processes cannot be looked at from here: its log's word stands, unchecked.
      const bool elsewhere = !role.host.empty() && role.host != here;
      role.state = elsewhere ? kNotSeen : "gone";
      unseen = unseen || elsewhere;
    }
  }
  std::sort(status.roles.begin(), status.roles.end(), [](const RoleStatus& a, const RoleStatus& b) {
    return a.name.size() != b.name.size() ? a.name.size() < b.name.size() : a.name < b.name;
  });
  // Between two attempts of a launch: no role runs, but the launch that restarts it does.
  if (status.launch_pid > 0 && !RunsOn(status.launch_pid, dir)) status.launch_pid = -1;
  if (status.launch_pid > 0) alive = true;
  status.state = alive                           ? RunStatus::State::kRunning
                 : fs::exists(dir / "model.bin") ? RunStatus::State::kFinished
                 : unseen                        ? RunStatus::State::kElsewhere
                                                 : RunStatus::State::kStopped;
  if (verify && status.state == RunStatus::State::kFinished) {
    // The run's product, read and checked whole as translate and export read it.
    const Status model = ReadModelFile((dir / "model.bin").string()).status();
    if (!model.ok()) status.model_damage = model.message();
  }

  PSF_ASSIGN_OR_RETURN(const std::vector<MetricsRecord> metrics,
                       ReadMetricsFile((dir / "metrics.jsonl").string(), &status.unreadable));
  for (const MetricsRecord& record : metrics) {
    if (record.count("loss")) status.last_train = record;
    if (record.count("valid_loss")) status.last_valid = record;
  }
  // What --verify compares each checkpoint's manifest with; unused without it.
  const CheckpointIdentity identity =
      verify ? JobCheckpointIdentity(config, ResolvedVocabSize(config)) : CheckpointIdentity{};
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    const Status files = verify ? VerifyCheckpoint(run_dir, step, identity) : CheckCheckpointFiles(run_dir, step);
    if (files.ok()) {
      status.newest_checkpoint = step;
      break;
    }
    // Pruned (keep_last) while it was read, as a running job's older checkpoints are: not damaged.
    if (!fs::exists(CheckpointDir(run_dir, step), ec)) continue;
    // A manifest whose shards are not all there (a disk that filled, a copy cut short) is not
    // complete; one without a manifest is still being written, or was cut off with its job.
    if (!files.IsNotFound())
      status.damaged_checkpoints.push_back("step " + std::to_string(step) + ": " + files.message());
  }
  return status;
}

std::string FormatRunStatus(const RunStatus& s) {
  std::ostringstream out;
  char buf[512];
  const int64_t step = StepOf(s.last_train).value_or(0);
  const char* state = s.state == RunStatus::State::kRunning    ? "running"
                      : s.state == RunStatus::State::kFinished ? "finished"
                      : s.state == RunStatus::State::kElsewhere
                          ? "not running on this machine; on other hosts its logs say it runs (not seen from here)"
                          : "not running (stopped or died)";
  out << "run " << s.run_dir << " (" << s.name << "): " << state;
  if (s.launch_pid > 0 &&
      std::none_of(s.roles.begin(), s.roles.end(), [](const RoleStatus& r) { return r.state == "running"; })) {
    out << " (psformer launch, pid " << s.launch_pid << ", is starting it again)";
  }
  out << "\n";
  if (s.last_train.empty()) {
    out << "  no training step logged yet (max_steps " << s.max_steps << ")\n";
  } else {
    const double tokens = Get(s.last_train, "tokens"), rate = Get(s.last_train, "tokens_per_s");
    // The steps the line covers ("steps"; a file of an older psformer lacks it: every_steps).
    const double covered = s.last_train.count("steps") ? std::max(1.0, Get(s.last_train, "steps")) : s.every_steps;
    const double step_s = rate > 0 ? tokens / rate / covered : 0.0;
    std::snprintf(buf, sizeof(buf), "  step %lld/%lld (%.0f%%)  loss %.3f  lr %.2e  %.0f tokens/s",
                  static_cast<long long>(step), static_cast<long long>(s.max_steps),
                  100.0 * step / std::max<int64_t>(1, s.max_steps), Get(s.last_train, "loss"), Get(s.last_train, "lr"),
                  rate);
    out << buf;
    if (s.state == RunStatus::State::kRunning && step_s > 0 && step < s.max_steps) {
      out << "  ETA " << DurationText(step_s * static_cast<double>(s.max_steps - step));
    }
    out << "\n";
    if (s.last_train.count("compute_s")) {
      std::snprintf(buf, sizeof(buf), "  a step: %.3f s = compute %.3f + push %.3f + wait %.3f + pull %.3f\n", step_s,
                    Get(s.last_train, "compute_s") / covered, Get(s.last_train, "push_s") / covered,
                    Get(s.last_train, "wait_s") / covered, Get(s.last_train, "pull_s") / covered);
      out << buf;
    }
    if (s.last_train.count("device_s") && step_s > 0) {
      const double device = Get(s.last_train, "device_s") / covered;
      std::snprintf(buf, sizeof(buf), "  device busy %.0f%% (%.3f s a step), launching thread's CPU %.3f s a step\n",
                    100.0 * device / step_s, device, Get(s.last_train, "launch_cpu_s") / covered);
      out << buf;
    }
  }
  if (!s.last_valid.empty()) {
    std::snprintf(buf, sizeof(buf), "  valid (step %lld): loss %.3f",
                  static_cast<long long>(StepOf(s.last_valid).value_or(0)), Get(s.last_valid, "valid_loss"));
    out << buf;
    for (const auto& [key, label] : {std::pair<const char*, const char*>{"valid_nll_loss", "nll"},
                                     {"valid_ppl", "ppl"},
                                     {"valid_accuracy", "accuracy"},
                                     {"valid_bleu", "BLEU"}}) {
      if (!s.last_valid.count(key)) continue;
      std::snprintf(buf, sizeof(buf), "  %s %.3f", label, Get(s.last_valid, key));
      out << buf;
    }
    out << "\n";
  }
  if (!s.model_damage.empty()) {
    out << "  damaged model: " << s.model_damage << "\n";
  } else if (s.verified && s.state == RunStatus::State::kFinished) {
    out << "  model: " << (fs::path(s.run_dir) / "model.bin").string() << " (read whole, CRC-32C verified)\n";
  }
  if (s.local) {
    if (!s.trainer_state_damage.empty()) {
      out << "  damaged trainer state: " << s.trainer_state_damage << "\n";
    } else {
      out << (s.trainer_state ? "  trainer state: " + (fs::path(s.run_dir) / "trainer_state.bin").string() +
                                    (s.verified ? " (CRC-32C verified)" : "") + "\n"
                              : std::string("  no trainer state yet\n"));
    }
  } else if (s.newest_checkpoint >= 0) {
    out << "  newest checkpoint: step " << s.newest_checkpoint << " (" << CheckpointDir(s.run_dir, s.newest_checkpoint)
        << (s.verified ? "; every shard's CRC-32C verified" : "") << ")\n";
    // A finished job checkpoints its last step; where that write failed, --resume would train
    // the steps since again, and the last step's weights are only in model.bin.
    const int64_t last_step = StepOf(s.last_train).value_or(0);
    if (s.state == RunStatus::State::kFinished && last_step > s.newest_checkpoint) {
      out << "  the last step, " << last_step << ", has no complete checkpoint; its weights are in "
          << (fs::path(s.run_dir) / "model.bin").string() << "\n";
    }
  } else if (s.state == RunStatus::State::kFinished) {
    // A job that checkpoints at all checkpoints its last step: without one, that write failed.
    out << (s.checkpoints_configured ? "  no checkpoint (see the logs' warnings)"
                                     : "  no checkpoint (checkpoint.every_steps and every_minutes are 0)")
        << "; the model: " << (fs::path(s.run_dir) / "model.bin").string() << "\n";
  } else {
    out << "  no checkpoint yet\n";
  }
  for (const std::string& why : s.damaged_checkpoints) out << "  damaged checkpoint, skipped: " << why << "\n";
  out << "\n";
  if (s.local) {
    out << "  (trained in one process, --local: no role processes)\n";
  } else {
    std::snprintf(buf, sizeof(buf), "  %-11s %-16s %-8s %-11s %-8s %-10s %s\n", "role", "host", "pid", "incarnation",
                  "restarts", "state", "last exit");
    out << buf;
  }
  for (const RoleStatus& r : s.roles) {
    const std::string host = r.host.empty() ? "(" + r.supervisor + ")" : r.host;
    std::snprintf(buf, sizeof(buf), "  %-11s %-16s %-8lld %-11d %-8d %-10s %s\n", r.name.c_str(), host.c_str(),
                  static_cast<long long>(r.pid), r.incarnation, r.incarnation, r.state.c_str(), r.last_exit.c_str());
    std::string row = buf;
    row.erase(row.find_last_not_of(" \n") + 1);
    out << row << "\n";
  }
  if (s.roles.empty() && !s.local) out << "  (no role process started yet)\n";
  if (std::any_of(s.roles.begin(), s.roles.end(), [](const RoleStatus& r) { return r.state == kNotSeen; })) {
    out << "  (" << kNotSeen << ": on another host, whose processes status cannot see from " << HostName()
        << "; its supervisor log's last word is that it runs: run status there to check)\n";
  }
  if (!s.launch_events.empty()) {
    const int r = s.launch_restarts;
    out << "\n  psformer launch"
        << (r == 0 ? std::string() : " restarted the job " + std::to_string(r) + (r == 1 ? " time" : " times")) << " ("
        << (fs::path(s.run_dir) / "logs" / "launch.log").string() << "):\n";
    constexpr size_t kShown = 5;  // the newest
    const size_t first = s.launch_events.size() > kShown ? s.launch_events.size() - kShown : 0;
    if (first > 0) out << "    (" << first << " earlier)\n";
    for (size_t i = first; i < s.launch_events.size(); ++i) out << "    " << s.launch_events[i] << "\n";
  }
  if (!s.last_problem.empty()) out << "\n  last warning or error: " << s.last_problem << "\n";
  for (const std::string& line : s.unreadable) out << "  unreadable: " << line << "\n";
  if (s.state == RunStatus::State::kStopped) {
    // What --resume would take up: the local trainer's state, or a job's complete checkpoint.
    const std::string command = std::string("psformer train") + (s.local ? " --local" : "") + " --config " +
                                (fs::path(s.run_dir) / "config.pbtxt").string() + " --run-dir " + s.run_dir;
    if (s.local ? s.trainer_state && s.trainer_state_damage.empty() : s.newest_checkpoint >= 0) {
      out << "  continue with: " << command << " --resume\n";
    } else {
      out << "  nothing to resume ("
          << (s.local ? (s.trainer_state ? "trainer_state.bin is damaged" : "no trainer_state.bin")
                      : "no complete checkpoint")
          << "); start over with: " << command << " --overwrite\n";
    }
  }
  return out.str();
}

}  // namespace psformer
