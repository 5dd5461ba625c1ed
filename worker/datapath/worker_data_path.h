// WorkerDataPath: the way of a worker's gradient to the servers and of the parameters back, as
// one component with named stages (docs/architecture.md, "The worker's data path"):
//
//   launching thread (WorkerLoop + the model)   backward reports a layer's gradient final: the
//                                               computer starts its device-to-host copy into
//                                               grad() (with bf16 gradients on a GPU: a rounding
//                                               kernel, then the copy into grad_bf16()) and hands
//                                               the range to kDeviceToHost. That array lies in
//                                               memory the client's transport lends to same-host
//                                               servers (PsClient::AllocatePushMemory): the copy
//                                               off the device is the gradient's one pass over
//                                               host memory before the servers read it
//   kDeviceToHost (GradientOutbound's thread)   sleeps until the copy is complete, posts the range
//   kClient (ClientThread)                      pushes every piece the range completes (its
//                                               checksum, or the bf16 rounding and copy of a CPU
//                                               worker's gradient, happen here), sends the
//                                               early pull, and between
//                                               commands takes in replies: the pull's pieces land
//                                               in params() while backward goes on
//
// The launching thread's part of a step is a queue push per layer; it waits only where the step
// itself must: for each layer's parameters before its forward (PullParameters, or layer by
// layer with PullWhileComputing), and, before backward writes the gradient's memory again, for
// every shard to hold the last push (SettlePush, through StepComputer::GuardGradientWrites). A
// step's push is acknowledged while the next step's forward runs: its failure is found by the
// next pull, and nothing of that next step is pushed.
//
// Thread safety: every member is called from the launching thread (the worker loop's).
#ifndef PSFORMER_WORKER_DATAPATH_WORKER_DATA_PATH_H_
#define PSFORMER_WORKER_DATAPATH_WORKER_DATA_PATH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "common/fault_plan.h"
#include "common/proto/config.pb.h"
#include "common/status.h"
#include "pserver/client/ps_client.h"
#include "worker/datapath/client_thread.h"
#include "worker/datapath/gradient_outbound.h"
#include "worker/datapath/pull_arrival.h"
#include "worker/step_computer.h"

namespace psformer {

class WorkerDataPath {
 public:
  // The data path of `computer`, whose gradient (and lookups' values, with the split embedding)
  // it first moves into memory the client's transport lends in place (StepComputer::
  // MoveGradientTo, MoveLookupsTo), where what is computed is what travels. REQUIRES: config,
  // faults and computer outlive the data path; `client` is connected.
  static StatusOr<std::unique_ptr<WorkerDataPath>> Create(const proto::JobConfig& config, const FaultPlan& faults,
                                                          StepComputer* computer, std::unique_ptr<PsClient> client);
  // As Create, leaving the gradient and the lookups where they are.
  WorkerDataPath(const proto::JobConfig& config, const FaultPlan& faults, StepComputer* computer,
                 std::unique_ptr<PsClient> client);
  ~WorkerDataPath();

  // Runs fn(client) on the client thread and returns its result (HELLO, rollbacks, reports).
  template <typename F>
  auto Call(F fn) {
    return client_.Call(std::move(fn));
  }
  // Whether the gradient travels in more pieces than shards, i.e. layer by layer during backward.
  bool overlapped() const { return overlap_; }

  // Phase 1: the parameters after `step` into the computer's params(), in the element type the
  // config asks for at that step: the pull sent early if it asks for the same, else a new one.
  // `*first_reply_s`: how long the wait for the first answer took (BSP: the slowest worker).
  Status PullParameters(int64_t step, double* first_reply_s);
  // Phase 1 while the step computes (cluster.forward_as_pulled): the pull of the parameters after
  // `step` (the one sent early, or a new one) is left landing, and the computer is told so
  // (StepComputer::ParamsArriving): its forward reads each layer once that layer's pieces are in.
  // The client thread waits for the pull, then runs `pulled` (the coordinator's checkpoint), before
  // it sends any piece of the step's push. REQUIRES: after BeginPush, before Compute.
  Status PullWhileComputing(int64_t step, std::function<void(PsClient&)> pulled);
  // After that Compute: how the pull of the parameters after `step` ended (OK: every parameter
  // the step read was the pull's; a failure: nothing of the step was pushed); `*first_reply_s` as
  // PullParameters'. The computer has the pull's digest (ParamsPulled) once it returns.
  Status ConfirmPull(int64_t step, double* first_reply_s);
  // The final weights after `step`, in fp32.
  Status PullFinal(int64_t step);

  // Phase 3, the push of `step`. Before Compute: returns the callback Compute hands each range
  // to as its copy starts; null when the gradient goes whole after Compute (no overlap, or
  // `whole`: an injected kill or stall strikes before the push and must find nothing sent).
  StatusOr<GradientCopying> BeginPush(int64_t step, bool whole);
  // After Compute: sleeps until every range's copy has landed and been handed to the client.
  void HandOver();
  // Pushes what is left (the whole gradient, without overlap; the lookups' rows of the embedding's
  // gradient, with cluster.split_embedding) and sends the early pull of the parameters after the
  // step. The push is left in flight: the next pull (or SettlePush) waits for it.
  Status FinishPush(const StepStats& stats);
  // Waits until every shard holds the last push (its acknowledgements). Its failure, once; OK when
  // nothing is in flight. The memory it lent the servers may still be theirs (BSP: until every
  // worker's push of the step is in): Compute's guard waits for that before writing it again.
  Status SettlePush();
  // After Wait said Aborted: every shard into the newest recovery epoch (PsClient::Rollback);
  // the pull in flight is forgotten with the client's requests. Returns the step rolled back to.
  StatusOr<int64_t> Rollback();

 private:
  // The push of one step (kClient's state: written by its commands only).
  struct StepPush {
    int64_t step = 0;
    std::optional<PsClient::Ticket> ticket;  // once the first range began it
    Status status;                           // the first failure; later ranges are then ignored
    uint64_t handed_over = 0;                // elements so far
  };

  // On the client thread: SettlePush's work (the pulls do it before they wait).
  Status SettlePush(PsClient& client);
  // On the client thread: the bytes of `range` of the push are on the host.
  void PushRange(PsClient& client, ElementRange range, const StepStats& stats);
  // On the client thread: the step's push begun from the computer's gradient (grad_bf16() when
  // it left the device rounded, else grad()); its pieces are sent as PushReady reports them.
  StatusOr<PsClient::Ticket> StartPush(PsClient& client, const StepStats& stats);
  // On the client thread: the early pull of the parameters after `step`, once.
  Status PullEarly(PsClient& client, int64_t step);
  // On the client thread: a pull of the parameters after `step`: the one in flight if it asks
  // for the same. `lend`: pieces may be left where they come (PullWhileComputing's); without it
  // every piece must land in params() (a pull in flight that lends is waited for and sent again).
  StatusOr<PsClient::Ticket> PullAfter(PsClient& client, int64_t step, proto::DType dtype, bool lend);
  // Sends a pull of the parameters after `step` as `dtype` into the computer's params() (or, for
  // bf16 into a computer that widens them itself, its params_bf16()), lending as `lend` says.
  StatusOr<PsClient::Ticket> StartPull(PsClient& client, int64_t step, proto::DType dtype, bool lend);
  // Whether the pull of the parameters after `step` leaves its pieces where they come: only
  // for a step computed as it lands by a computer that reads them there, never after a step
  // that may be validated (validation reads params()). Like PullDtype, the step's alone.
  bool LendsPull(int64_t step) const;
  // The element type of the pull of the parameters after `step`: bf16 when the config says so,
  // except after the steps that are validated (the metrics describe the fp32 masters). It depends
  // on the step alone: every worker, restarted or not, computes a step from the same values.
  proto::DType PullDtype(int64_t step) const;

  const proto::JobConfig& config_;
  const FaultPlan& faults_;
  StepComputer* computer_;
  uint64_t n_;
  bool overlap_;
  // kClient's state, written by its commands only (declared before the threads, which run
  // commands until they are destroyed).
  StepPush push_;
  std::optional<PsClient::Ticket> unsettled_;  // a push FinishPush left in flight...
  int64_t unsettled_step_ = 0;                 // ...of this step
  std::optional<PsClient::Ticket> pull_;  // the pull sent early, not yet waited for...
  int64_t pull_step_ = -1;                // ...of the parameters after this step,
  proto::DType pull_dtype_ = proto::FLOAT32;
  bool pull_lends_ = false;
  Status pull_failure_;  // the pull a step computes from failed: nothing of the step is pushed
  // The pull a step computes from as it lands (PullWhileComputing): written by the client thread,
  // awaited by the computer.
  PullArrival arrival_;
  // The stages; destroyed in reverse order, the way data flows: the outbound stage posts what it
  // still holds, then the client thread runs it.
  ClientThread client_;
  GradientOutbound outbound_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATAPATH_WORKER_DATA_PATH_H_
