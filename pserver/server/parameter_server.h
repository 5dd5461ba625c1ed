// ParameterServer: one shard of the flat parameter vector, served over a Van. Embeddable: tests
// and `psformer pserver` build one with Create, call Run on a thread of their choosing, and Stop
// it from any thread (or send SHUTDOWN). What each message does and how a job recovers from a
// lost server: docs/wire-protocol.md and docs/failure-model.md.
//
// The server itself only dispatches: every message is parsed and validated
// (pserver/wire/message_validator.h, then the sender's incarnation and recovery epoch), refused
// with a reason or handed to its handler. The concerns live in their own classes:
//   ConsistencyPolicy   BSP, SSP or ASYNC: when pushes, pulls and checkpoints are served
//   ShardOptimizer      the parameters, Adam moments and the update
//   ShardCheckpointer   checkpoints of this shard
//   RecoveryEpoch       the epoch served and the checkpoint step it began at
//   ShutdownTracker     when to stop once the job has ended
//   ReplySender         answers and refusals
//   PendingRequests     pulls and checkpoints waiting for their step
// Its own code, by concern: parameter_server.cc starts the shard, dispatches and takes pushes;
// parameter_server_pulls.cc answers pulls; parameter_server_checkpoints.cc writes checkpoints and
// rolls back.
#ifndef PSFORMER_PSERVER_SERVER_PARAMETER_SERVER_H_
#define PSFORMER_PSERVER_SERVER_PARAMETER_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/fault_plan.h"
#include "common/host_groups.h"
#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "common/transport/van.h"
#include "pserver/recovery/recovery_epoch.h"
#include "pserver/server/consistency_policy.h"
#include "pserver/server/pending_requests.h"
#include "pserver/server/reply_sender.h"
#include "pserver/server/shard_checkpointer.h"
#include "pserver/server/shard_optimizer.h"
#include "pserver/server/shutdown_tracker.h"
#include "pserver/wire/message_validator.h"

namespace psformer {

struct ParameterServerOptions {
  proto::JobConfig config;                     // resolved (FillDefaults + ValidateConfig); cluster.* sets the mode.
  int shard = 0;                               // this server's index, 0 .. cluster.servers-1.
  uint64_t parameter_count = 0;                // elements of the whole flat vector.
  uint64_t config_digest = 0;                  // ModelConfigDigest; guards checkpoints against another model.
  uint64_t job_id = 0;                         // messages of any other job are refused.
  std::string endpoint = "tcp://127.0.0.1:0";  // where to listen; port 0 = any free port.
  std::string run_dir;                         // checkpoints under RUN_DIR/checkpoints; empty = no checkpoints.
  bool resume = false;                         // start from the newest complete checkpoint, if there is one.
  int threads = 0;                             // update threads; 0 = cluster.threads_per_process, else all cores.
  int poll_ms = 100;                           // how often Run looks at Stop().
  uint32_t incarnation = 0;                    // > 0: restarted by a supervisor, so the job rolls back.
  // Fills elements [begin, end) of the flat vector with their initial values (the command passes
  // InitParamRange of common/param_init.h); unset = zeros.
  std::function<void(uint64_t begin, uint64_t end, float* out)> init;
  // Called on the serving thread after each attempt to write this shard's checkpoint, with its
  // result: how the command hears of a failure, which does not stop the server by itself.
  std::function<void(int64_t step, const Status& result)> on_checkpoint;
  // Where the model's layers begin (ParamLayout::LayerStarts): with cluster.overlap under BSP the
  // shard is collected and updated in pieces cut there (JobPieceTable). Empty: whole shards.
  std::vector<uint64_t> layer_starts;
  // Where this process's ShmVan takes injected KILL_IN_SHM faults from (the switch given to
  // MakeServerVan); null: a server without shared memory, whose plan arms a switch nobody reads.
  std::shared_ptr<ShmFaultSwitch> shm_faults;
};

// Counters, readable from any thread while Run works.
struct ParameterServerStats {
  std::atomic<uint64_t> pushes_accepted{0};
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> updates{0};
  std::atomic<uint64_t> pieces_applied{0};  // piece updates (BSP with overlap; else one per update)
  std::atomic<uint64_t> pulls_answered{0};
  std::atomic<uint64_t> bf16_pulls_answered{0};  // of pulls_answered: in bf16 (cluster.param_dtype)
  // Resent pulls not answered twice: the first was still waiting for its step (PendingRequests).
  std::atomic<uint64_t> resent_pulls_absorbed{0};
  std::atomic<uint64_t> checkpoints_written{0};
  std::atomic<int64_t> applied_step{0};  // BSP: the last step applied.
  std::atomic<uint64_t> rollbacks{0};    // times this server reloaded a checkpoint for a ROLLBACK.
  std::atomic<uint64_t> update_ns{0};    // time spent taking accepted pushes in (summing, updating).
  // The step the last rollback went back to (stored before `rollbacks` counts it).
  std::atomic<int64_t> rollback_step{0};
  // After each message: pulls waiting for their step, and accepted pushes not applied yet (BSP:
  // their step still lacks other workers' pushes).
  std::atomic<uint64_t> pending_pulls{0};
  std::atomic<uint64_t> pending_pushes{0};
  RejectCounters rejected;
};

class ParameterServer {
  struct CreateKey {};  // only Create builds servers (it must bind and initialise them).

 public:
  // Binds `van` to options.endpoint and initialises (or resumes) the shard.
  static StatusOr<std::unique_ptr<ParameterServer>> Create(ParameterServerOptions options, std::unique_ptr<Van> van);
  ParameterServer(CreateKey, ParameterServerOptions options, std::unique_ptr<Van> van);
  ~ParameterServer();

  // Serves until Stop() or the job's end (see ShutdownTracker). Returns an error for transport
  // failures and for a rollback whose checkpoint cannot be loaded.
  Status Run();
  // Asks Run to return within poll_ms. Any thread.
  void Stop() { stop_.store(true); }
  // After Run: writes a checkpoint of the last applied step unless one exists (BSP; a run dir
  // needed). Used when the job is interrupted: workers stop only after a complete push, so every
  // shard has applied the same step and these checkpoints form a complete one.
  Status CheckpointLastStep();

  const std::string& endpoint() const { return endpoint_; }  // what peers connect to.
  ShardRange range() const { return range_; }
  const ParameterServerStats& stats() const { return stats_; }

 private:
  Status Start();
  void Handle(RawMessage raw);
  Refusal CheckIncarnation(const proto::Header& h);
  // Who pushes: a worker, or with host summing a host group's aggregator (its sender_id, the
  // group). Its last step pushed, and recording a new one (for a group: each of its workers').
  int pushers() const { return groups_.summing() ? groups_.count() : options_.config.cluster().workers(); }
  int64_t LastPushed(int pusher) const;
  void SetPushed(int pusher, int64_t step);
  void HandleHello(const WireMessage& msg);
  void HandlePush(WireMessage msg);
  // Takes the pieces [first, last) of an accepted push (or its retry) not yet heard from worker `w`.
  // Returns how many were new.
  int TakePieces(int w, int first, int last, WireMessage msg);
  void HandlePull(const WireMessage& msg);
  void HandleCheckpoint(const WireMessage& msg);
  void HandleRollback(const WireMessage& msg);
  void HandleShutdown(const WireMessage& msg);
  void RefuseJobFinished(const std::string& peer, const proto::Header& request);
  // Loads checkpoint `step` (0 = the initial values) into the shard and forgets every later push.
  Status RestoreTo(int64_t step);
  void Initialize();
  void Applied(const AppliedUpdate& update);
  void ServePendingPulls();
  void SendParams(const std::string& peer, const proto::Header& request);
  Status WriteCheckpoint(int64_t step);
  void ServePendingCheckpoints();
  void PublishProgress();
  void PublishQueues();

  ParameterServerOptions options_;
  std::unique_ptr<Van> van_;
  std::string endpoint_;
  ShardRange range_;
  std::vector<uint64_t> piece_starts_;  // the shard's pieces, offsets in the shard
  std::vector<uint8_t> split_pieces_;   // per piece: 1 where it is pushed in two parts
  ServerScope scope_;
  ShardOptimizer optimizer_;
  std::unique_ptr<ConsistencyPolicy> policy_;
  ShardCheckpointer checkpointer_;
  RecoveryEpoch epoch_;
  ShutdownTracker shutdown_;
  ReplySender replies_;
  ShardProgress progress_;
  HostGroups groups_;                   // none: the flat path
  std::vector<uint32_t> incarnations_;  // highest incarnation seen per worker...
  std::vector<uint32_t> aggregator_incarnations_;  // ...and per host group's aggregator.
  // Per pusher, the pieces of its next step (LastPushed + 1) already taken; once all are in,
  // that step counts as pushed. A split piece's ROWS part has a slot of its own after the
  // pieces' (HeardSlot).
  int HeardSlot(int piece, proto::PushPart part) const { return part == proto::ROWS ? rows_slot_[piece] : piece; }
  std::vector<int> rows_slot_;  // per piece: the slot of its ROWS part, -1 when not split
  std::vector<std::vector<bool>> heard_;
  std::vector<int> heard_count_;
  double applied_loss_sum_ = 0;  // summed loss and target tokens of every worker's batch of
  uint64_t applied_tokens_ = 0;  // the last whole step applied (sent with its PARAMS)...
  double next_loss_sum_ = 0;     // ...and of the step whose pieces are being applied.
  uint64_t next_tokens_ = 0;
  PendingRequests pending_pulls_;
  PendingRequests pending_checkpoints_;
  // The step of the checkpoint this shard's state is, as written or loaded (-1: none, as after
  // a start from the initial values): asked for it again (the coordinator's checkpoint of the last step
  // after a periodic one of the same step, or a resent request), it answers without writing.
  int64_t written_step_ = -1;
  Status fatal_;  // a rollback that could not load its checkpoint.
  FaultPlan faults_;
  std::atomic<bool> stop_{false};
  ParameterServerStats stats_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_PARAMETER_SERVER_H_
