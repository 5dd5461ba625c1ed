// A role process (a worker or a parameter-server shard) as its supervisor sees it: started with
// `psformer <role> ...`, restarted with the same identity when it dies abnormally, killed when it
// stops sending heartbeats (docs/failure-model.md).
//
// Heartbeats: the child inherits the write end of a pipe whose descriptor number is in the
// environment variable PSFORMER_HEARTBEAT_FD; common/heartbeat.h writes a byte to it every
// cluster.heartbeat_interval_ms. Silence for cluster.heartbeat_timeout_ms counts as a hang.
//
// The child runs in a process group of its own with stdin from /dev/null: a Ctrl-C at the
// terminal reaches only the supervisor, which then stops its roles in order (workers first), and
// Ctrl-Z too, which then pauses them (Pause, Continue) before it stops itself.
// It still dies with the supervisor (PR_SET_PDEATHSIG), so killing the supervisor's process group
// ends the whole job.
//
// When a child exits, however it ended, its shared-memory segments (shm_segment.h) are removed.
#ifndef PSFORMER_LAUNCHER_ROLE_PROCESS_H_
#define PSFORMER_LAUNCHER_ROLE_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace psformer {

struct RoleProcessOptions {
  std::string name;               // "worker-1", "pserver-0": for logs.
  std::string executable;         // path of the psformer binary.
  std::vector<std::string> args;  // after the executable; "--incarnation K" is appended per start.
  std::string log_file;           // the child's stdout and stderr are appended here.
  // NAME=VALUE entries added to (or replacing in) the child's environment: how secrets such as
  // the job's CURVE keys reach it, never in `args`, which any user can read with ps.
  std::vector<std::string> environment;
  // Entries added on top of `environment` from the first restart on (incarnation >= 1), to emulate
  // a restart on another kind of host (fault.restart_environment).
  std::vector<std::string> restart_environment;
  int heartbeat_timeout_ms = 5000;  // 0 = no hang detection.
  int max_restarts = 5;
  int restart_backoff_ms = 200;  // doubled each restart, capped at 10 s.
  // The role reports "ready" once started up (common/supervisor_report.h). Then a role that
  // fails twice in a row the same way before it is ready is not restarted again: that is a
  // configuration error (a model too large, a bad file), which no restart fixes.
  bool reports_ready = false;
  // The program unblocks the stop signals once it handles them (InstallRoleStopSignals, as every
  // psformer role does): the child is started with them blocked, so that a stop asked while it
  // starts waits for its handler instead of killing it. False for any other program (a test's
  // shell script), which would never see them.
  bool holds_stop_signals_until_handled = false;
  // A role that exits with kExitOutOfResources (the machine refused it a thread or memory,
  // common/supervisor_report.h) is started again after a wait of its own, which does not count
  // against max_restarts: resource_wait_ms, doubled each time in a row, capped at 30 s, at most
  // max_resource_waits times in a row; then the role fails, naming the cause.
  int resource_wait_ms = 2000;
  int max_resource_waits = 6;
  // Told the pid of each incarnation as it starts (the janitor of the job's shared memory,
  // shm_janitor.h); may be empty.
  std::function<void(pid_t)> started;
};

// Not thread-safe: one thread drives a RoleProcess (Start, then Poll until it finishes).
class RoleProcess {
 public:
  enum class State { kIdle, kRunning, kBackingOff, kSucceeded, kFailed };

  explicit RoleProcess(RoleProcessOptions options);
  ~RoleProcess();  // kills a child still running.
  RoleProcess(const RoleProcess&) = delete;
  RoleProcess& operator=(const RoleProcess&) = delete;

  // Starts incarnation 0.
  Status Start();
  // Reaps an exited child, checks heartbeats, restarts after backoff. Call every few ms.
  // Returns the state after the poll.
  State Poll();
  // Sends `signal` to the running child (tests and shutdown).
  void Signal(int signal);
  // Begins an orderly stop: nothing is restarted any more, and a running child gets `signal`.
  // Poll then reports kSucceeded when the child exits 0 and kFailed otherwise; a role waiting
  // to be restarted becomes kFailed at once.
  void RequestStop(int signal);
  bool finished() const { return state_ == State::kSucceeded || state_ == State::kFailed; }
  // Kills the child (SIGKILL) and waits for it; the state becomes kFailed unless it had finished.
  void Kill();
  // Job control (Ctrl-Z at the supervisor's terminal): Pause stops a running child's process group
  // (SIGSTOP); Continue lets it go on (SIGCONT) and starts its heartbeat window afresh, as a paused
  // role sends none.
  void Pause();
  void Continue();
  // Starts the heartbeat window afresh: the silence so far was the supervisor's (it was stopped
  // itself, and read nothing), not the role's.
  void ForgetSilence() { last_heartbeat_ = std::chrono::steady_clock::now(); }

  State state() const { return state_; }
  pid_t pid() const { return pid_; }
  int incarnation() const { return incarnation_; }
  int restarts() const { return incarnation_; }  // every restart, waits for resources included
  // Why the process failed (kFailed), e.g. "worker-0 killed by signal 9 (Killed) after 5
  // restart(s); ...", with the last line of its log, which mostly says the cause.
  const std::string& failure() const { return failure_; }
  // The checkpoint failures the role reported since the last call, oldest first.
  std::vector<std::string> TakeCheckpointFailures();
  // The progress lines the role reported since the last call (the coordinator's "step N/M  loss
  // ..." and validation lines), oldest first.
  std::vector<std::string> TakeProgress();
  // The restarts decided since the last call, oldest first, each as a sentence: "worker-1 killed
  // by signal 9 (Killed); restarting as incarnation 1".
  std::vector<std::string> TakeRestarts() { return std::exchange(restarts_, {}); }
  const std::string& name() const { return options_.name; }
  // A stop signal that reached the role from another sender than this supervisor, as the role
  // reported it (kReportSignalled): the signal's number and its sender's pid (0: the kernel); the
  // supervisor stops the whole job in order. Each report is taken once.
  struct ForeignSignal {
    int signal = 0;
    pid_t sender = 0;
  };
  std::optional<ForeignSignal> TakeForeignSignal() { return std::exchange(foreign_signal_, std::nullopt); }

 private:
  Status Spawn();
  void HandleExit(int wait_status);
  // After a kExitOutOfResources exit: waits for the machine (RoleProcessOptions), or fails once
  // the waits in a row are spent. `last_words`: the last line of the role's log (the cause).
  void WaitForResources(const std::string& last_words);
  void ReadHeartbeats();
  void HandleReport(const std::string& line);

  RoleProcessOptions options_;
  State state_ = State::kIdle;
  pid_t pid_ = -1;
  int heartbeat_fd_ = -1;  // read end of the heartbeat pipe.
  int incarnation_ = 0;
  bool stopping_ = false;  // RequestStop was called: no more restarts.
  std::chrono::steady_clock::time_point last_heartbeat_;
  std::chrono::steady_clock::time_point restart_at_;
  std::string failure_;
  std::string partial_report_;  // bytes of a report line not yet complete
  std::vector<std::string> checkpoint_failures_;
  std::vector<std::string> progress_;
  std::vector<std::string> restarts_;
  std::string fatal_;                 // the role's last kReportFatal text
  std::string stopped_;               // the role's kReportStopped text: it stopped, not finished
  std::optional<ForeignSignal> foreign_signal_;  // reported, not yet taken
  bool ready_ = false;                // this incarnation reported kReportReady
  std::string last_startup_failure_;  // how the previous incarnation failed before ready, if it did
  int counted_restarts_ = 0;          // restarts that count against max_restarts
  int resource_waits_ = 0;            // kExitOutOfResources exits in a row
};

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_ROLE_PROCESS_H_
