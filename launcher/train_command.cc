// `psformer train`: resolve the config, then train: under mpirun as one rank of a cluster, else
// in single-node mode (servers and workers on this machine, each under a supervisor), or with
// --local in this one process without servers (worker/train/local_trainer.h).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <optional>
#include <utility>

#include "common/config_loader.h"
#include "common/host_groups.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/trace.h"
#include "common/write_file.h"
#include "launcher/cluster_plan.h"
#include "launcher/command_line.h"
#include "launcher/job_runner.h"
#include "launcher/memory_check.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/port_reservation.h"
#include "launcher/role_supervisor.h"
#include "launcher/run_directory.h"
#include "launcher/run_files.h"
#include "launcher/run_lock.h"
#include "launcher/thread_limit.h"
#include "worker/backend/backend_factory.h"
#include "worker/data/batch_source.h"
#include "worker/train/local_trainer.h"

namespace psformer {
namespace {

// Under mpirun every rank runs this command, before MPI starts; rank 0 (as the launcher's
// environment names it) alone holds the run directory's lock and clears it for --overwrite.
bool OwnsRunDirectory() {
  if (!StartedByMpirun()) return true;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMIX_RANK");
  return rank != nullptr && std::string(rank) == "0";
}

// Whether the run's lock is taken before the checks: not for a --resume of a directory that is
// missing or no directory (the check refuses it, and taking the lock would create it).
bool LocksBeforeChecking(const RunDirectoryRequest& request) {
  std::error_code ec;
  if (std::filesystem::is_directory(request.path, ec)) return true;
  return request.mode != RunDirectoryMode::kResume && !std::filesystem::exists(request.path, ec);
}

// Takes the run directory's lock (run_lock.h) and checks that the run may use the directory as
// asked. The lock is returned for the job's life (null on ranks other than 0); nothing is changed
// when the answer is no. A live job's lock is waited for at most `wait`. --overwrite's clearing
// is not done here but by ClearForOverwrite, once the job has passed every check that could
// still refuse it (a GPU, a port, a socket's path): a refused job must not have deleted the run.
StatusOr<std::unique_ptr<RunLock>> UseRunDirectory(const RunDirectoryRequest& request, const JobConfig& config,
                                                   std::chrono::seconds wait) {
  std::unique_ptr<RunLock> lock;
  if (OwnsRunDirectory() && LocksBeforeChecking(request)) {
    PSF_ASSIGN_OR_RETURN(lock, RunLock::Acquire(request.path, wait));
  }
  if (Status checked = CheckRunDirectory(request, config); !checked.ok()) {
    if (lock) lock->Abandon();
    return checked;
  }
  return lock;
}

// --overwrite: clears the earlier run's files from `run_dir`, saying what went and what stayed.
// Called by the job just before it first writes the directory (JobOptions::before_first_write).
Status ClearForOverwrite(const std::string& run_dir) {
  auto cleared = RemoveRunFiles(run_dir);
  if (!cleared.ok()) return cleared.status();
  if (!cleared->removed.empty()) {
    std::cerr << "psformer train: --overwrite: removed the earlier run's " << JoinNames(cleared->removed) << " from "
              << run_dir << "\n";
  }
  if (!cleared->kept.empty()) {
    std::cerr << "psformer train: --overwrite: kept " << JoinNames(cleared->kept) << " in " << run_dir
              << ": not files psformer writes\n";
  }
  return Status::Ok();
}

// --dry-run: prints the resolved config and its memory figures, and refuses what the run would
// refuse for the config and the run directory (read only: no lock is taken, nothing created).
// What depends on the machine it runs on (the data present, the memory) only warns, since a
// config is often checked on another machine than the one that trains it.
int DryRun(const JobConfig& config, JobPlacement placement, const Status& files, const RunDirectoryRequest* request) {
  std::cout << ConfigToText(config);
  // ValidateConfig computed the same figures with overflow checks: this cannot fail.
  auto estimate = EstimateMemory(config, ResolvedVocabSize(config));
  const MachineMemory machine = ThisMachine(config.cluster().backend());
  if (estimate.ok()) {
    std::cout << DescribeMemory(config, *estimate, placement, machine);
    const Status fits = CheckMemoryFits(config, *estimate, placement, machine);
    if (!fits.ok()) std::cerr << "psformer train: warning: " << fits.message() << "\n";
  }
  if (!files.ok()) std::cerr << "psformer train: warning: " << files.message() << "\n";
  if (Status threads = CheckThreadCount("cluster.threads_per_process", config.cluster().threads_per_process());
      !threads.ok()) {
    std::cerr << "psformer train: warning: " << threads.message() << " (on this machine)\n";
  }
  // cluster.workers = 0 is resolved by the machine (a worker per GPU, or 1), and then must match
  // the host groups: the run here would refuse a mismatch.
  const HostGroups groups = HostGroups::Of(config);
  if (placement == JobPlacement::kSingleNode && config.cluster().workers() == 0 && groups.summing()) {
    const int gpus = machine.gpus;
    const auto gpu_workers = ChooseGpuWorkers(config.cluster().backend(), {{HostName(), gpus}});
    const int here = gpu_workers.ok() && *gpu_workers ? gpus : 1;
    if (groups.workers() != here) {
      std::cerr << "psformer train: warning: cluster.host_groups " << groups.ToString() << " add up to "
                << groups.workers() << " workers, but cluster.workers = 0 makes " << here
                << " on this machine (a worker per GPU, or 1 without): the run here would refuse it; set "
                << "cluster.workers=" << groups.workers() << "\n";
    }
  }
  // Under mpirun the ranks must suit the roles, as the run's plan would require.
  if (const int ranks = MpirunRankCount(); placement == JobPlacement::kClusterRank && ranks > 0) {
    const Status suits = ClusterPlan::CheckRanks(ranks, config.cluster().servers(), config.cluster().workers());
    if (!suits.ok()) return ReportError("train", suits);
  }
  if (request == nullptr) return 0;
  if (const std::string holder = RunLock::Holder(request->path); !holder.empty()) {
    return ReportError("train", "run directory " + request->path + " is in use by a live job: " + holder);
  }
  // The run-directory check sees the config as the run would: with its vocabulary size resolved
  // from the data (a checkpoint's digest covers it), where the data is here to name it.
  JobConfig checked = config;
  if (!request->local && checked.model().vocab_size() == 0 && files.ok()) {
    if (auto source = MakeBatchSource(checked); source.ok()) {
      checked.mutable_model()->set_vocab_size((*source)->vocab_size());
    }
  }
  // A resume's checkpoints are checked against the vocabulary, which only the data can name.
  if (request->mode == RunDirectoryMode::kResume && ResolvedVocabSize(checked) == 0) return 0;
  if (Status usable = CheckRunDirectory(*request, checked); !usable.ok()) return ReportError("train", usable);
  return 0;
}

// --resume: takes from the run's own config what a resume must not resolve anew
// (InheritFromRun), saying so; nothing when that config cannot be read (CheckRunDirectory then
// says why).
void TakeFromTheRun(const std::string& run_dir, JobConfig* config) {
  auto run = LoadRunConfigFile((std::filesystem::path(run_dir) / "config.pbtxt").string());
  if (!run.ok()) return;
  FillDefaults(&*run);
  const std::string filled = InheritFromRun(*run, config);
  if (!filled.empty()) std::cerr << "psformer train: --resume: " << filled << ", as the run in " << run_dir << " has\n";
}

// What a resume found in the run directory, so that one that ends without a new checkpoint (the
// servers refused the checkpoint, the job failed or was stopped before a step) can leave the
// run's config.pbtxt as it found it: the run's own continue command must still work.
struct RunBeforeResume {
  std::string config_text;        // the run's config.pbtxt
  std::string newest_checkpoint;  // NewestCompleteCheckpoint
};

std::optional<RunBeforeResume> NoteRunBeforeResume(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "config.pbtxt", std::ios::binary);
  if (!in) return std::nullopt;
  RunBeforeResume before;
  before.config_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  before.newest_checkpoint = NewestCompleteCheckpoint(run_dir);
  return before;
}

void RestoreConfigUnlessTheRunWentOn(const std::string& run_dir, const RunBeforeResume& before) {
  if (NewestCompleteCheckpoint(run_dir) != before.newest_checkpoint) return;
  const std::string path = (std::filesystem::path(run_dir) / "config.pbtxt").string();
  if (Status restored = WriteFileAtomically(path, before.config_text); !restored.ok()) {
    std::cerr << "psformer train: warning: could not put the run's config back: " << restored.message() << "\n";
    return;
  }
  std::cerr << "psformer train: the resumed job wrote no checkpoint; " << path << " is as it was before\n";
}

// Trains the resolved, checked config in `run_dir` (its lock held by the caller): in this
// process with --local, else as a supervisor of role processes (single node, or one MPI rank).
int Train(const JobConfig& config, const std::string& run_dir, bool resume, bool local,
          const std::function<Status()>& before_first_write, const std::function<void()>& on_failure) {
  SetLogTag("train");
  SetLogLevel(static_cast<LogLevel>(config.logging().level()));
  if (local) {
    TrainOptions train;
    train.run_dir = run_dir;
    train.resume = resume;
    train.before_first_write = before_first_write;
    int stopped_by = 0;
    const Status status = RunLocalTraining(config, train, &stopped_by);
    if (!status.ok()) return ReportError("train", status);
    if (stopped_by != 0) {
      const std::string run_config = (std::filesystem::path(run_dir) / "config.pbtxt").string();
      std::cerr << "psformer train: interrupted (" << strsignal(stopped_by) << "); its state is in " << run_dir
                << "/trainer_state.bin; continue with: psformer train --local --config " << run_config << " --run-dir "
                << run_dir << " --resume\n";
      return stopped_by == SIGHUP ? kExitHangup : kExitInterrupted;
    }
    std::cout << "trained " << config.name() << ": " << run_dir << "/model.bin\n";
    return 0;
  }
  JobOptions job;
  job.config = config;
  job.run_dir = run_dir;
  job.resume = resume;
  job.before_first_write = before_first_write;
  job.on_failure = on_failure;
  job.executable = "/proc/self/exe";
  char path[4096];
  const ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (len > 0) job.executable.assign(path, len);
  const int status = StartedByMpirun() ? RunClusterRank(job) : RunSingleNode(job);
  if (status != 0 || StartedByMpirun()) return status;
  if (config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    // Its weights are the servers' updates with pseudo-random gradients: no model to translate with.
    std::cout << "emulated " << config.name() << " (cluster.backend EMULATED: synthetic gradients, not a trained "
              << "model): " << run_dir << "/model.bin\n";
  } else {
    std::cout << "trained " << config.name() << ": " << run_dir << "/model.bin\n";
  }
  return status;
}

}  // namespace

int RunTrainCommand(const Args& args) {
  KeepRunningWhenTheConsoleCloses();
  po::options_description options("train options");
  // clang-format off
  options.add_options()
      ("config", po::value<std::string>()->required(), "job config, protobuf text format (configs/*.pbtxt)")
      ("set", po::value<std::vector<std::string>>()->composing(),
       "override one field, field.path=value (repeatable), e.g. --set model.heads=16")
      ("run-dir", po::value<std::string>(), "run directory (default runs/<config name>-<time>)")
      ("resume", po::bool_switch(), "continue the run in --run-dir from its newest complete checkpoint; refused "
       "unless the config trains the same model (docs/running.md, Stopping and continuing)")
      ("overwrite", po::bool_switch(), "start over in a --run-dir that holds an earlier run, deleting its files")
      ("local", po::bool_switch(), "train in this process, without parameter servers (debugging, tests)")
      ("dry-run", po::bool_switch(), "validate, print the resolved config and exit")
      ("wait-for-run-dir", po::value<int>()->default_value(0), "seconds to wait for a live job holding --run-dir "
       "to end before refusing (psformer launch waits when it restarts a job whose old ranks may still be stopping)");
  // clang-format on
  ParsedOptions parsed = ParseOptions("train", "--config FILE [--set field=value ...] [--run-dir DIR]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  const auto& values = parsed.values;

  std::vector<std::string> overrides;
  if (values.count("set")) overrides = values["set"].as<std::vector<std::string>>();
  if (Status checked = CheckOverrides(overrides); !checked.ok()) return ReportError("train", checked, kExitUsage);
  auto config = ResolveConfig(values["config"].as<std::string>(), overrides);
  if (!config.ok()) return ReportError("train", config.status());
  // Every role reads it; a malformed value is said once, here, before any starts.
  if (auto window = TraceWindowFromEnvironment(); !window.ok())
    return ReportError("train", window.status(), kExitUsage);
  const bool local = values["local"].as<bool>();
  if (local && StartedByMpirun()) {
    // Every rank would train the whole model into the same run directory.
    return ReportError("train",
                       "--local trains in this one process, and under mpirun every rank would train the same "
                       "run: drop --local (the ranks become the job's servers and workers), or run it without "
                       "mpirun",
                       kExitUsage);
  }
  const JobPlacement placement = local               ? JobPlacement::kLocal
                                 : StartedByMpirun() ? JobPlacement::kClusterRank
                                                     : JobPlacement::kSingleNode;
  // Under mpirun a job is stopped in order by SIGUSR1 (role_supervisor.h), which may come while
  // this rank still starts (main holds it until here).
  if (!local) KeepOrderlyStopUntilSupervision();
  const bool resume = values["resume"].as<bool>();
  if (resume && !values.count("run-dir")) {
    return ReportError("train", "--resume needs --run-dir: the run directory to continue", kExitUsage);
  }
  if (resume && values["overwrite"].as<bool>()) {
    return ReportError("train", "--resume and --overwrite contradict each other: continue the run, or start over",
                       kExitUsage);
  }
  const std::string run_dir = values.count("run-dir") ? values["run-dir"].as<std::string>() : DefaultRunDir(*config);
  if (run_dir.empty()) return ReportError("train", "--run-dir is empty: name the run directory", kExitUsage);
  if (resume) TakeFromTheRun(run_dir, &*config);
  RunDirectoryRequest request;
  request.path = run_dir;
  request.local = local;
  request.mode = resume                           ? RunDirectoryMode::kResume
                 : values["overwrite"].as<bool>() ? RunDirectoryMode::kOverwrite
                                                  : RunDirectoryMode::kFresh;
  Status files = CheckConfigFiles(*config);
  if (files.ok()) files = CheckPreparedCorpus(*config);
  if (files.ok()) files = PinSentencePiece(&*config);
  if (values["dry-run"].as<bool>())
    return DryRun(*config, placement, files, values.count("run-dir") ? &request : nullptr);
  if (!files.ok()) return ReportError("train", files);
  // Role processes get the vocabulary size in their config, so servers need not read the data;
  // it is resolved before anything is checked against it (the memory, the run's checkpoints).
  if (!local && config->model().vocab_size() == 0) {
    auto source = MakeBatchSource(*config);
    if (!source.ok()) return ReportError("train", source.status());
    config->mutable_model()->set_vocab_size((*source)->vocab_size());
  }
  auto estimate = EstimateMemory(*config, ResolvedVocabSize(*config));
  if (!estimate.ok()) return ReportError("train", estimate.status());
  const MachineMemory machine = ThisMachine(config->cluster().backend());
  if (Status fits = CheckMemoryFits(*config, *estimate, placement, machine); !fits.ok()) {
    return ReportError("train", fits);
  }
  // Every role process of this machine would start that many threads for its compute.
  if (Status threads = CheckThreadCount("cluster.threads_per_process", config->cluster().threads_per_process());
      !threads.ok()) {
    return ReportError("train", threads);
  }
  const int wait_s = values["wait-for-run-dir"].as<int>();
  if (wait_s < 0) return ReportError("train", "--wait-for-run-dir must be 0 or more seconds", kExitUsage);
  auto lock = UseRunDirectory(request, *config, std::chrono::seconds(wait_s));
  if (!lock.ok()) return ReportError("train", lock.status());

  std::optional<RunBeforeResume> before;
  if (resume && !local && OwnsRunDirectory()) before = NoteRunBeforeResume(run_dir);
  // What a failed job undoes, once: under mpirun rank 0 does it before MPI_Finalize (Train).
  bool undone = false;
  const auto undo = [&] {
    if (std::exchange(undone, true)) return;
    // What is at run_dir now is not this job's, if anything is: nothing there is put back or removed.
    if (RunDirectoryWasLost()) return;
    if (before) RestoreConfigUnlessTheRunWentOn(run_dir, *before);
    // A job refused before it wrote its config (a port in use, no GPU) leaves the directory as it
    // found it: no .lock, and no directory it had to create.
    std::error_code ec;
    if (*lock && !std::filesystem::exists(std::filesystem::path(run_dir) / "config.pbtxt", ec)) (*lock)->Abandon();
  };
  std::function<Status()> clear;
  if (request.mode == RunDirectoryMode::kOverwrite && OwnsRunDirectory())
    clear = [&] { return ClearForOverwrite(run_dir); };
  const int status = Train(*config, run_dir, resume, local, clear, undo);
  if (status != kExitSuccess) undo();
  return JobExitStatus(status);
}

}  // namespace psformer
