// A run directory belongs to one run. `psformer train` asks here, before it writes anything,
// whether it may use a directory the way it was told to:
//
//   fresh (no flag)  the directory is missing, empty, or holds no file a run writes;
//   --overwrite      the files an earlier run left are removed first (run_files.h: psformer's
//                    only, each named on the console);
//   --resume         the directory holds a run of the same model (ResumeConflicts finds nothing)
//                    and a checkpoint it can continue from.
//
// A refusal leaves the directory exactly as it was. The files a run writes: config.pbtxt,
// model.bin, metrics.jsonl, trainer_state.bin (--local), checkpoints/, logs/.
#ifndef PSFORMER_LAUNCHER_RUN_DIRECTORY_H_
#define PSFORMER_LAUNCHER_RUN_DIRECTORY_H_

#include <string>
#include <vector>

#include "common/config_loader.h"
#include "common/status.h"

namespace psformer {

enum class RunDirectoryMode { kFresh, kOverwrite, kResume };

struct RunDirectoryRequest {
  std::string path;
  RunDirectoryMode mode = RunDirectoryMode::kFresh;
  // --local: the checkpoint is trainer_state.bin, not checkpoints/step-N/.
  bool local = false;
};

// The files and folders in `dir` that an earlier run wrote (names relative to `dir`, a
// checkpoints/ folder counted only when it holds a checkpoint). Empty when `dir` is missing.
std::vector<std::string> EarlierRunFiles(const std::string& dir);

// OK when training `config` may use the directory as `request` says; otherwise what is wrong
// and what to do instead. Reads only. REQUIRES: `config` is resolved, its vocabulary size
// filled in unless --local (the checkpoints it can resume from depend on it).
Status CheckRunDirectory(const RunDirectoryRequest& request, const JobConfig& config);

// The fields in which `config` differs from the config a run was trained with (`run`) and that
// may not change on resume, each as "field.path: the run has X, this config Y". The fields that
// may change are MayChangeOnResume's; a zero model.vocab_size or cluster.workers (resolved at
// start) matches any. cluster.backend may change between CPU, CUDA and AUTO, never to or from
// EMULATED (emulated workers push synthetic gradients: a real run continued so would lose its
// weights, and its checkpoints with them).
std::vector<std::string> ResumeConflicts(const JobConfig& run, const JobConfig& config);

// What a resume takes from the run it continues (`run`, the run's own config.pbtxt) rather than
// resolving again at start: cluster.workers left 0 and cluster.host_groups left empty become the
// run's, since its checkpoints hold that many workers' steps and sums in those groups, and a
// resume resolved otherwise (one worker per GPU, one group per host) would be refused by every
// server. Returns the fields it filled in, as "field = value" ("" when none).
std::string InheritFromRun(const JobConfig& run, JobConfig* config);

// Whether the field at `path` ("checkpoint.every_steps") may differ between a run and its resume:
// what it changes is when and how the job runs, never which weights it computes.
bool MayChangeOnResume(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_RUN_DIRECTORY_H_
