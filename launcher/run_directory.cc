#include "launcher/run_directory.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>

#include "common/checkpoint/checkpoint_store.h"
#include "common/field_differences.h"
#include "common/param_layout.h"
#include "pserver/server/shard_checkpointer.h"
#include "pserver/wire/piece_table.h"
#include "worker/train/trainer_state.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRunFiles[] = {"config.pbtxt", "model.bin", "metrics.jsonl", "trainer_state.bin"};
constexpr const char* kRunFolders[] = {"checkpoints", "logs"};

bool NonEmptyDirectory(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::directory_iterator(dir, ec) != fs::directory_iterator();
}

std::string Join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// A zero that the launcher resolves at start (from the data, from the GPUs) matches any value.
bool ResolvedAtStart(const std::string& path, const std::string& value) {
  // An empty cluster.host_groups is one group per host, filled in from the placement.
  return ((path == "model.vocab_size" || path == "cluster.workers") && value == "0") ||
         (path == "cluster.host_groups" && value == "[]");
}

// The newest checkpoint of `dir` that verifies for `config`'s model, or why there is none.
StatusOr<int64_t> NewestUsableCheckpoint(const std::string& dir, const JobConfig& config) {
  const int vocab = ResolvedVocabSize(config);
  const CheckpointIdentity id = JobCheckpointIdentity(config, vocab);
  const std::vector<int64_t> steps = ListCheckpointSteps(dir);
  std::vector<std::string> skipped;
  for (int64_t step : steps) {
    const Status verified = VerifyCheckpoint(dir, step, id);
    if (verified.IsInvalidArgument()) {
      // Another model's (or grouping's): the servers refuse to load it (LoadNewestShardCheckpoint),
      // and stepping past it to an older one would drop the steps since without a word.
      return Status::InvalidArgument(
          "the checkpoint of step " + std::to_string(step) + " cannot be resumed: " + verified.message() +
          "; to resume from an earlier one, move " + CheckpointDir(dir, step) + " out of the run");
    }
    if (verified.ok()) {
      // The servers skip the same ones, but say so only in their logs.
      for (const std::string& why : skipped) {
        std::cerr << "psformer train: warning: --resume: skipping the checkpoint of " << why << "; resuming from step "
                  << step << "\n";
      }
      if (skipped.empty()) std::cerr << "psformer train: --resume: from the checkpoint of step " << step << "\n";
      return step;
    }
    skipped.push_back("step " + std::to_string(step) + ": " + verified.message());
  }
  if (steps.empty()) return Status::NotFound("it has no checkpoint (checkpoints/step-*)");
  return Status::NotFound("none of its checkpoints can be resumed from (" + Join(skipped, "; ") + ")");
}

}  // namespace

bool MayChangeOnResume(const std::string& path) {
  static const std::set<std::string> kMayChange = {
      "name",
      "training.max_steps",
      "training.valid_every",
      "training.stop_at_valid_accuracy",
      "checkpoint",
      "logging",
      "fault",
      "data.src_lang",
      "data.tgt_lang",
      "data.max_length",
      "data.max_length_ratio",
      "data.spm_sha256",  // taken from the run when left empty, and checked against the corpus (PinSentencePiece)
      "cluster.backend",
      "cluster.bind_host",
      "cluster.base_port",
      "cluster.heartbeat_interval_ms",
      "cluster.heartbeat_timeout_ms",
      "cluster.max_restarts",
      "cluster.restart_backoff_ms",
      "cluster.threads_per_process",
      "cluster.frame_bytes",
      "cluster.retry_ms",
      "cluster.streams",
      "cluster.authenticate",
      "cluster.encryption",              // how traffic is sealed, not what it carries
      "cluster.emulated_step_ms",        // how long an emulated step waits, not what it pushes
      "cluster.emulated_copy_gb_per_s",  // how fast an emulated device copies, likewise
  };
  // A listed section covers every field in it.
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
    if (kMayChange.count(path.substr(0, dot))) return true;
  }
  return kMayChange.count(path) > 0;
}

std::vector<std::string> ResumeConflicts(const JobConfig& run, const JobConfig& config) {
  std::vector<std::string> conflicts;
  for (const FieldDifference& d : FieldDifferences(run, config, MayChangeOnResume)) {
    if (!ResolvedAtStart(d.path, d.b)) conflicts.push_back(d.path + ": the run has " + d.a + ", this config " + d.b);
  }
  const auto emulated = [](const JobConfig& c) { return c.cluster().backend() == proto::ClusterConfig::EMULATED; };
  if (emulated(run) != emulated(config)) {
    conflicts.push_back("cluster.backend: the run has " + proto::ClusterConfig::Backend_Name(run.cluster().backend()) +
                        ", this config " + proto::ClusterConfig::Backend_Name(config.cluster().backend()) +
                        " (emulated workers push synthetic gradients: a run is emulated from its start or never)");
  }
  return conflicts;
}

std::string InheritFromRun(const JobConfig& run, JobConfig* config) {
  // A record of the run's corpus, not a choice left open: taken without a word.
  if (config->data().spm_sha256().empty()) config->mutable_data()->set_spm_sha256(run.data().spm_sha256());
  std::string filled;
  auto& cluster = *config->mutable_cluster();
  if (cluster.workers() == 0 && run.cluster().workers() > 0) {
    cluster.set_workers(run.cluster().workers());
    filled += "cluster.workers = " + std::to_string(cluster.workers());
  }
  if (cluster.host_groups_size() == 0 && run.cluster().host_groups_size() > 0) {
    *cluster.mutable_host_groups() = run.cluster().host_groups();
    filled += std::string(filled.empty() ? "" : ", ") + "cluster.host_groups = " +
              FieldText(run.cluster(), run.cluster().GetDescriptor()->FindFieldByName("host_groups"));
  }
  return filled;
}

std::vector<std::string> EarlierRunFiles(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const char* name : kRunFiles) {
    if (fs::exists(fs::path(dir) / name, ec)) found.push_back(name);
  }
  if (!ListCheckpointSteps(dir).empty()) found.push_back("checkpoints/");
  if (NonEmptyDirectory(fs::path(dir) / "logs")) found.push_back("logs/");
  return found;
}

Status CheckRunDirectory(const RunDirectoryRequest& request, const JobConfig& config) {
  const std::string& dir = request.path;
  if (dir.empty()) return Status::InvalidArgument("--run-dir is empty: name the run directory");
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  if (exists && !fs::is_directory(dir, ec)) {
    return Status::InvalidArgument("--run-dir " + dir + " is a file, not a directory");
  }
  const std::vector<std::string> earlier = EarlierRunFiles(dir);
  if (request.mode == RunDirectoryMode::kFresh) {
    if (earlier.empty()) return Status::Ok();
    return Status::InvalidArgument("run directory " + dir + " already holds a run (" + Join(earlier, ", ") +
                                   "); continue it with --resume, or start over with --overwrite (which deletes "
                                   "those files), or choose another --run-dir");
  }
  if (request.mode == RunDirectoryMode::kOverwrite) {
    // --overwrite deletes inside the run directory only: what a link of psformer's folders points
    // to would keep the earlier run's files, and the new run would write among them (a resume, an
    // average would then mix the two runs' checkpoints).
    for (const char* folder : {"checkpoints", "logs", "tensorboard", "valid_bleu", "ipc"}) {
      const fs::path path = fs::path(dir) / folder;
      if (!fs::is_symlink(path, ec)) continue;
      const std::string target = fs::read_symlink(path, ec).string();
      return Status::InvalidArgument("--overwrite: " + path.string() + " is a symbolic link (to " + target +
                                     "), and --overwrite deletes only inside the run directory: the earlier run's "
                                     "files there would stay among the new run's; empty " +
                                     target + " yourself (or remove the link), then start over");
    }
    return Status::Ok();
  }

  const std::string state = request.local ? "trainer_state.bin" : "checkpoint";
  if (!exists) {
    return Status::NotFound("--resume: run directory " + dir +
                            " does not exist (nothing to resume: no config.pbtxt, no " + state + ")");
  }
  const std::string run_config_path = (fs::path(dir) / "config.pbtxt").string();
  if (!fs::exists(run_config_path, ec)) {
    return Status::NotFound("--resume: " + dir + " is not a run directory: it has no config.pbtxt (and so no " + state +
                            " to resume from)");
  }
  // A run of the local trainer continues only as one, and a job's only as a job: say which,
  // before the configs' differences (a local run's config.pbtxt leaves vocab_size to the data).
  const bool local_state = fs::exists(fs::path(dir) / "trainer_state.bin", ec);
  const bool job_state = !ListCheckpointSteps(dir).empty();
  if (!request.local && local_state && !job_state) {
    return Status::InvalidArgument("--resume: " + dir +
                                   " was trained with --local (it holds trainer_state.bin and no checkpoints/): "
                                   "continue it with --local");
  }
  if (request.local && job_state && !local_state) {
    return Status::InvalidArgument("--resume: " + dir +
                                   " was trained by a job with parameter servers (it holds checkpoints/, no "
                                   "trainer_state.bin): continue it without --local");
  }
  auto run_config = LoadRunConfigFile(run_config_path);
  if (!run_config.ok()) return run_config.status().WithContext("--resume: the run's config");
  FillDefaults(&*run_config);
  const std::vector<std::string> conflicts = ResumeConflicts(*run_config, config);
  if (!conflicts.empty()) {
    return Status::InvalidArgument("--resume: this config trains another model than the run in " + dir +
                                   " (fields that may change on resume are listed in docs/running.md, "
                                   "Stopping and continuing):\n  " +
                                   Join(conflicts, "\n  "));
  }
  if (request.local) {
    const std::string path = (fs::path(dir) / "trainer_state.bin").string();
    if (!fs::exists(path, ec)) return Status::NotFound("--resume: " + dir + " has no trainer_state.bin to resume from");
    auto loaded = ReadTrainerState(path);
    if (!loaded.ok()) return loaded.status().WithContext("--resume");
    return Status::Ok();
  }
  // Groups left to the placement (empty) are the ones the run resolved at its start.
  JobConfig checked = config;
  if (checked.cluster().host_groups_size() == 0) {
    *checked.mutable_cluster()->mutable_host_groups() = run_config->cluster().host_groups();
  }
  auto newest = NewestUsableCheckpoint(dir, checked);
  if (newest.status().IsInvalidArgument()) return Status::InvalidArgument("--resume: " + newest.status().message());
  if (!newest.ok()) {
    return Status::NotFound("--resume: nothing to continue in " + dir + ": " + newest.status().message() +
                            "; start over with --overwrite");
  }
  // The servers would load a step past the end and every role would fail, restart after restart.
  if (*newest > config.training().max_steps()) {
    return Status::InvalidArgument(
        "--resume: the newest checkpoint in " + dir + " is of step " + std::to_string(*newest) +
        ", past training.max_steps (" + std::to_string(config.training().max_steps()) +
        "): continue with --set training.max_steps=N for an N of at least " + std::to_string(*newest));
  }
  return Status::Ok();
}

}  // namespace psformer
