// ParameterServer: one shard of the flat parameter vector, served over a Van (DESIGN.md,
// Parameters and servers). Embeddable: tests and `psformer pserver` build one with Create, call
// Run on a thread of their choosing, and Stop it from any thread (or send SHUTDOWN).
//
// Protocol (each request answered on the connection it came on):
//   PUSH(worker w, step t, gradient of the shard, target_tokens, loss)  -> ACK (duplicate=true if
//        (w, t) was already applied or buffered: exactly once) or ERROR.
//        t must be the next step of w (t <= last pushed: duplicate; t > last + 1: future step).
//   PULL(step t) -> PARAMS(step t) with the shard's parameters "after step t" (BSP: with the
//        summed loss_sum and target_tokens of step t's pushes, so metrics show the global loss):
//        BSP: once step t's update is applied (t older than the last applied step: stale step).
//        SSP: current parameters once every worker has pushed step t - staleness, so no worker
//             starts step t+1 while another has not finished step t - staleness.
//        ASYNC: current parameters at once.
//        A worker may not pull a step it has not pushed (future step); the coordinator may.
//   HELLO(incarnation k) -> ACK carrying in `step` the last step the sender pushed. A message with
//        an incarnation below the highest seen from its sender is refused (stale incarnation).
//   HEARTBEAT -> HEARTBEAT.   CHECKPOINT(step c) -> ACK once the shard of step c is written (BSP
//        waits for step c; SSP/ASYNC write the current state labelled c).
//   SHUTDOWN from a worker -> ACK: that worker is done. SHUTDOWN from the coordinator -> ACK: the
//        job ends; from then on every worker request is refused as "job finished" (so workers of
//        SSP/async, which stop at different steps, learn of it), and Run returns once every
//        worker is done (said SHUTDOWN or was told "job finished"; a worker never heard from
//        counts as done), or at the latest 60 s after the coordinator's SHUTDOWN.
// Updates. BSP: a step's pushes are summed in worker order (GradientAggregator), divided by their
// total target tokens (NormalizeGradient), then one Adam update at LearningRate(config, t).
// SSP and ASYNC: each push is normalised by its own tokens and applied on arrival.
// Every message is validated first (common/wire/message_validator.h plus the step and incarnation
// checks above); a refused one is answered with ERROR, counted by reason, logged, and dropped.
// With every_steps > 0 the server also checkpoints by itself after each such step (all servers at
// the same steps, so the checkpoints form a consistent cut).
//
// Recovery (DESIGN.md, Failure model; README, Failure behaviour). A server restarted by its
// supervisor (incarnation > 0) has lost the updates since its shard's last checkpoint, so the job
// rolls back: the restarted server loads the newest complete checkpoint c (or the initial values
// when there is none) and enters a new recovery epoch e (a job-wide counter in RUN_DIR, so epochs
// only grow). Every PUSH, PULL and CHECKPOINT carries its sender's epoch; one from another epoch
// is refused with reason "other epoch", the reply naming e and c. The worker that hears it sends
// ROLLBACK(c, e) to every shard; a shard in an older epoch reloads checkpoint c (pending requests
// answered "other epoch"), and every worker resumes at step c + 1. In BSP a step's gradient is a
// pure function of the weights after the step before, so the replayed steps push the very same
// bytes and the job ends with the same weights as undisturbed: a server kill costs the steps
// since the last checkpoint and a restart, nothing else. HELLO is answered in any epoch (with
// the server's epoch), so a restarted worker learns where the job is.
#ifndef PSFORMER_PSERVER_PARAMETER_SERVER_H_
#define PSFORMER_PSERVER_PARAMETER_SERVER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint_store.h"
#include "common/fault_plan.h"
#include "common/param_layout.h"
#include "common/proto/config.pb.h"
#include "common/transport/van.h"
#include "common/wire/message_validator.h"
#include "pserver/gradient_aggregator.h"
#include "pserver/shard_optimizer.h"

namespace psformer {

struct ParameterServerOptions {
  proto::JobConfig config;      // resolved (FillDefaults + ValidateConfig); cluster.* sets the mode.
  int shard = 0;                // this server's index, 0 .. cluster.servers-1.
  uint64_t parameter_count = 0;  // elements of the whole flat vector.
  uint64_t config_digest = 0;   // ModelConfigDigest; guards checkpoints against another model.
  uint64_t job_id = 0;          // messages of any other job are refused.
  std::string endpoint = "tcp://127.0.0.1:0";  // where to listen; port 0 = any free port.
  std::string run_dir;          // checkpoints under RUN_DIR/checkpoints; empty = no checkpoints.
  bool resume = false;          // start from the newest complete checkpoint, if there is one.
  int threads = 0;              // update threads; 0 = cluster.threads_per_process, else all cores.
  int poll_ms = 100;            // how often Run looks at Stop().
  uint32_t incarnation = 0;     // > 0: restarted by a supervisor, so recover (see Recovery).
  // Fills elements [begin, end) of the flat vector with their initial values (the command passes
  // InitParamRange of common/param_init.h); unset = zeros.
  std::function<void(uint64_t begin, uint64_t end, float* out)> init;
  // Called on the serving thread after each attempt to write this shard's checkpoint, with its
  // result: how the command hears of a failure, which does not stop the server by itself.
  std::function<void(int64_t step, const Status& result)> on_checkpoint;
};

// Counters, readable from any thread while Run works.
struct ParameterServerStats {
  std::atomic<uint64_t> pushes_accepted{0};
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> updates{0};
  std::atomic<uint64_t> pulls_answered{0};
  std::atomic<uint64_t> bf16_pulls_answered{0};  // of pulls_answered: in bf16 (cluster.param_dtype)
  std::atomic<uint64_t> checkpoints_written{0};
  std::atomic<int64_t> applied_step{0};  // BSP: the last step applied.
  std::atomic<uint64_t> rollbacks{0};    // times this server reloaded a checkpoint for a ROLLBACK.
  RejectCounters rejected;
};

class ParameterServer {
  struct CreateKey {};  // only Create builds servers (it must bind and initialise them).

 public:
  // Binds `van` to options.endpoint and initialises (or resumes) the shard.
  static StatusOr<std::unique_ptr<ParameterServer>> Create(ParameterServerOptions options, std::unique_ptr<Van> van);
  ParameterServer(CreateKey, ParameterServerOptions options, std::unique_ptr<Van> van);
  ~ParameterServer();

  // Serves until Stop() or a SHUTDOWN message. Returns an error only for transport failures.
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
  struct PendingPull {
    std::string peer;
    proto::Header request;
  };
  Status Start();
  void Handle(RawMessage raw);
  Verdict CheckIncarnation(const proto::Header& h);
  Verdict CheckEpoch(const proto::Header& h) const;
  void HandleRollback(WireMessage msg);
  // Loads checkpoint `step` (0 = the initial values) into the shard and forgets every later push.
  Status RestoreTo(int64_t step);
  void Initialize();
  uint64_t NewEpoch() const;
  void HandlePush(WireMessage msg);
  void HandlePull(WireMessage msg);
  void HandleCheckpoint(WireMessage msg);
  void ApplyStep();
  void ApplyOnArrival(WireMessage msg);
  bool PullReady(const proto::Header& request) const;
  void ServePendingPulls();
  void SendParams(const std::string& peer, const proto::Header& request);
  Status WriteCheckpoint(int64_t step);
  void ServePendingCheckpoints();
  void Reply(const std::string& peer, const proto::Header& request, proto::MessageType type, bool duplicate = false);
  void Refuse(const std::string& peer, const proto::Header* request, const Rejection& why);
  proto::Header ReplyHeader(const proto::Header& request, proto::MessageType type) const;
  int64_t SlowestWorkerStep() const;

  ParameterServerOptions options_;
  std::unique_ptr<Van> van_;
  std::string endpoint_;
  ShardRange range_;
  ServerScope scope_;
  proto::ClusterConfig::Consistency mode_;
  ShardOptimizer optimizer_;
  GradientAggregator aggregator_;         // BSP only.
  std::vector<float> grad_;               // SSP/ASYNC: one push as fp32.   (range size)
  std::vector<int64_t> worker_steps_;     // last step each worker pushed.
  std::vector<uint32_t> incarnations_;    // highest incarnation seen per worker.
  int64_t applied_step_ = 0;              // BSP: last step applied; else the highest step applied.
  double applied_loss_sum_ = 0;           // BSP: summed loss and target tokens of every worker's
  uint64_t applied_tokens_ = 0;           // batch of applied_step_ (sent with its PARAMS).
  std::vector<PendingPull> pending_pulls_;
  std::vector<PendingPull> pending_checkpoints_;
  void HandleShutdown(WireMessage msg);
  void MarkWorkerDone(int worker);
  uint64_t epoch_ = 0;                    // recovery epoch (see Recovery).
  bool finishing_ = false;                // the coordinator ended the job.
  std::vector<bool> workers_done_;        // workers that said SHUTDOWN or were told the job ended.
  std::vector<bool> workers_seen_;        // workers this server heard from at all.
  std::chrono::steady_clock::time_point finish_deadline_;  // Run returns by then regardless.
  // A worker told "job finished" in reply to a request may not have got the reply (a lost
  // message); the server then lingers long enough to answer its next retry too.
  bool told_finished_ = false;
  bool stop_scheduled_ = false;
  std::chrono::steady_clock::time_point stop_at_;
  int64_t restored_step_ = 0;             // the checkpoint step epoch_ started from.
  Status fatal_;                          // a rollback that could not load its checkpoint.
  FaultPlan faults_;
  std::atomic<bool> stop_{false};
  ParameterServerStats stats_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_PARAMETER_SERVER_H_
