// What `psformer status RUN_DIR` shows: the state of a training run read from its directory alone
// (config.pbtxt, metrics.jsonl, logs/, checkpoints/), so it works from another terminal while the
// job runs and after it ended, without talking to any process of the job.
//
// Role processes come from the supervisors' logs ("NAME: started pid P (incarnation I)", exits and
// restarts); a pid counts as alive only if that process exists on this machine and runs psformer
// with this run directory. Under mpirun a rank's log also says its host; a role on another host
// that its log says runs cannot be checked from here, and is shown as such (kNotSeen), not as
// gone. The job is running while any role process is alive, finished when model.bin exists and
// none is, elsewhere when only other hosts' roles may be, and stopped (interrupted or dead)
// otherwise; a job that psformer launch is starting again (between two attempts: the launch of
// its newest restart still runs here) counts as running.
#ifndef PSFORMER_LAUNCHER_RUN_STATUS_H_
#define PSFORMER_LAUNCHER_RUN_STATUS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

// RUN_DIR/logs/launch.log: what `psformer launch` decided as each attempt of the job ended (a
// restart, giving up, the end), a line "psformer launch: [YYYY-MM-DD HH:MM:SS UTC] TEXT" each; its
// other lines are the job's output, kept there while launch's console was gone.
inline constexpr char kLaunchLogPrefix[] = "psformer launch: ";
// How a restart line ends: " (psformer launch pid P)". While that launch lives and no role runs,
// the job is between two attempts, not stopped.
inline constexpr char kLaunchRestartPid[] = " (psformer launch pid ";

// The state of a role process on another host that its log says runs: not checked from here.
inline constexpr char kNotSeen[] = "not seen";

struct RoleStatus {
  std::string name;        // worker-0, pserver-1, ...
  std::string supervisor;  // the log it was read from: supervisor (single node), supervisor-R (rank R)
  std::string host;        // this machine's name for a single-node job; under MPI the rank's, from its log
  int64_t pid = -1;
  int incarnation = 0;    // also the number of restarts
  std::string state;      // running, finished, restarting, exited, failed, gone, kNotSeen
  std::string last_exit;  // how its last incarnation ended, if it did ("killed by signal 9 (Killed)")
};

struct RunStatus {
  // kElsewhere: no role process runs here, and roles of other hosts were running by their logs
  // (status cannot look at another machine's processes).
  enum class State { kRunning, kFinished, kStopped, kElsewhere };
  std::string run_dir;
  std::string name;  // the config's name
  int64_t max_steps = 0;
  int every_steps = 1;                 // logging.every_steps
  bool checkpoints_configured = true;  // checkpoint.every_steps or every_minutes > 0
  State state = State::kStopped;
  std::vector<RoleStatus> roles;
  std::map<std::string, double> last_train;      // the newest metrics.jsonl line with "loss" (empty if none)
  std::map<std::string, double> last_valid;      // ... with "valid_loss"
  int64_t newest_checkpoint = -1;                // the newest step whose checkpoint is complete (CheckCheckpointFiles)
  std::vector<std::string> damaged_checkpoints;  // newer ones with a manifest but not all shards: "step N: why"
  // The checkpoints (or a --local run's trainer_state.bin) were read whole and their CRC-32Cs
  // checked, as a resume checks them (status --verify), not only their sizes.
  bool verified = false;
  bool local = false;                      // trained with --local: one process, logs/trainer.log, no roles
  bool trainer_state = false;              // RUN_DIR/trainer_state.bin (what a --local run continues from)
  std::string trainer_state_damage;        // why that file cannot be resumed from ("" when it looks whole)
  std::string model_damage;                // --verify: why RUN_DIR/model.bin cannot be loaded ("" when it can)
  std::string last_problem;                // the newest warning or error line of the logs
  int launch_restarts = 0;                 // the times psformer launch started the job again (launch.log)
  int64_t launch_pid = -1;                 // the launch of the newest restart line, while it runs on this machine
  std::vector<std::string> launch_events;  // launch.log's own lines, "YYYY-MM-DD HH:MM:SS UTC TEXT", oldest first
  std::vector<std::string> unreadable;     // lines of metrics.jsonl and the logs left out ("PATH:LINE: why")
};

// NotFound (saying so) if `run_dir` is not a run directory: no config.pbtxt or logs/ in it.
// `verify`: read every checkpoint file, newest first until one is intact, and check it as
// `train --resume` does (sizes, CRC-32Cs, the model it was written for), instead of sizes alone;
// and read model.bin whole as `translate` does.
StatusOr<RunStatus> ReadRunStatus(const std::string& run_dir, bool verify = false);

// One screen of text, ending in a newline.
std::string FormatRunStatus(const RunStatus& status);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_RUN_STATUS_H_
