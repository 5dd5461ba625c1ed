// HostAggregator: the summing point of one host group (cluster.host_groups; docs/architecture.md,
// "Across hosts"). The group's workers, all on its host, send it every PUSH and PULL over the
// same-host path; it answers them as their shards would. To the servers it is one more client:
// it sends each piece's sum of its group once, and asks for each piece's parameters once.
//
//   PUSH  It holds the workers' shares of a piece (in their received frames, no copy) until every
//         worker of the group has sent its own, adds them in worker order (g0 + g1) + g2 ...
//         (elementwise, as a server adds a flat job's pushes: a group of all workers gives the
//         flat sum bit for bit) and sends the sum, with the group's summed target tokens and
//         loss, as a PUSH from AGGREGATOR `group`. A piece pushed in two parts
//         (cluster.split_embedding) is two such sums, each collected, sent and answered on its
//         own: the DENSE parts' sum, and the ROWS parts' (SumRows: the union of their runs),
//         which the server adds as it adds a flat job's ROWS parts. A worker's push (part) is
//         answered only when the server has answered the sum (of that part): until then the
//         worker keeps its gradient and sends it again if need be, so an aggregator that dies
//         loses nothing (its successor collects again, and the server recognises a sum it
//         already holds). One exception: once the server answers a pull of the piece's step,
//         the sum (of each part) was applied, and shares still waiting for a sum are answered at
//         once (a successor's, whose predecessor died between two answers).
//   PULL  A piece of a step is asked for once, by the first worker that wants it; the answer is
//         copied (its CRC-32C checked in the copy) into memory from the Van, shared memory on
//         the same-host path, and every worker of the group reads that one copy in place. The
//         two newest steps are kept, for a restarted worker.
//   Epochs  It follows the newest recovery epoch its workers' requests carry, forgetting every
//         sum and copy of the older one. A request of an older epoch is answered with what the
//         server says of it (a HEARTBEAT in that epoch brings the server's "other epoch"), so a
//         worker that missed a rollback learns of it.
//   End   It stops retry_ms after every worker of its group has said goodbye (SHUTDOWN), or
//         when Stop() is called.
// Its own requests to the servers are sent again when unanswered (Resender, as a worker's), and
// not for ever: a request unanswered for timeout_ms, or a server's shared-memory segment refused
// past the job's heartbeat timeout, ends Run with a message naming the server, the message and
// the step (UpstreamRequests). Its command exits: restarted by its supervisor for the first, as
// a worker whose wait ran out; the job ends for the second (gave_up_on_segment), as a worker's.
//
// The aggregator itself only dispatches, as a server does: every message is parsed and validated
// (a worker's as its shard would, a server's as a worker's client would) and refused with a
// reason or handed to its handler. The concerns live in their own classes:
//   GroupSum           a piece's shares of a step (the server's GradientAggregator) and the
//                      summing pass (SumShares: the server's SumInWorkerOrder)
//   UpstreamRequests   the aggregator's requests to the servers, until answered, and resends
//   ParameterCopies    the pulled parameters its workers read in place
//   WorkerAnswers      answers and refusals to its workers (the server's ReplySender)
//   HostLinkBoard      (cluster.sums_first) the oldest step of its sums on their way to other
//                      hosts, for the servers of its host to send their answers to those hosts after
// Its own code, by concern: host_aggregator.cc starts it, dispatches and follows epochs;
// host_aggregator_sums.cc takes shares and sends sums; host_aggregator_pulls.cc answers pulls.
//
// Thread safety: Run on one thread; Stop and stats() from any.
#ifndef PSFORMER_PSERVER_AGGREGATOR_HOST_AGGREGATOR_H_
#define PSFORMER_PSERVER_AGGREGATOR_HOST_AGGREGATOR_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fault_plan.h"
#include "common/host_groups.h"
#include "common/proto/config.pb.h"
#include "common/transport/host_link_board.h"
#include "common/transport/van.h"
#include "pserver/aggregator/group_sum.h"
#include "pserver/aggregator/parameter_copies.h"
#include "pserver/aggregator/upstream_requests.h"
#include "pserver/aggregator/worker_answers.h"
#include "pserver/timing.h"
#include "pserver/wire/message_validator.h"
#include "pserver/wire/piece_table.h"

namespace psformer {

struct HostAggregatorOptions {
  proto::JobConfig config;  // resolved; cluster.host_groups names the groups.
  int group = 0;            // this aggregator's group.
  uint64_t parameter_count = 0;
  std::vector<uint64_t> layer_starts;  // ParamLayout::LayerStarts (the job's pieces)
  uint64_t job_id = 0;
  std::vector<std::string> servers;  // endpoint of shard k at index k.
  std::string endpoint;              // where the group's workers reach it (ipc:// on their host).
  uint32_t incarnation = 0;          // restart count.
  int threads = 0;                   // summing threads; 0 = the servers' share of the cores.
  int poll_ms = 20;                  // how often Run looks at Stop() and resends.
  int timeout_ms = kRequestTimeoutMs;          // a request to a server unanswered this long ends Run (timing.h).
  std::shared_ptr<ShmFaultSwitch> shm_faults;  // as ParameterServerOptions::shm_faults
};

struct HostAggregatorStats : UpstreamCounters {  // resends and bytes_up: UpstreamCounters
  std::atomic<uint64_t> shares{0};            // workers' pushes of a piece taken
  std::atomic<uint64_t> duplicate_shares{0};  // ...already held or already summed
  std::atomic<uint64_t> sums_sent{0};         // sums sent to the servers (resends not counted)
  std::atomic<uint64_t> sums_answered{0};
  std::atomic<uint64_t> pulls_sent{0};     // pieces asked of the servers (resends not counted)
  std::atomic<uint64_t> pulls_served{0};   // workers' pulls answered with parameters
  std::atomic<uint64_t> bytes_down{0};     // payload bytes received from them
  RejectCounters rejected;  // workers' requests and servers' replies refused, by reason
};

class HostAggregator {
  struct CreateKey {};

 public:
  // Binds options.endpoint and connects to every server.
  static StatusOr<std::unique_ptr<HostAggregator>> Create(HostAggregatorOptions options, std::unique_ptr<Van> van);
  HostAggregator(CreateKey, HostAggregatorOptions options, std::unique_ptr<Van> van);
  ~HostAggregator();

  // Serves until Stop() or the end of the job (every worker of the group said goodbye): Ok; or
  // until the servers leave a request unanswered past the bounds (UpstreamRequests): Unavailable
  // saying what it waited for.
  Status Run();
  // Whether Run ended because a server's shared-memory segment kept being refused: a restarted
  // aggregator would map the same segment, so its command asks not to be restarted.
  bool gave_up_on_segment() const { return upstream_.gave_up_on_segment(); }
  void Stop() { stop_.store(true); }
  const std::string& endpoint() const { return endpoint_; }
  const HostAggregatorStats& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;

  Status Start();
  void Handle(RawMessage raw);
  void HandleRequest(WireMessage msg);
  void HandleReply(WireMessage msg);
  // Workers' requests, by type.
  void TakeShare(int local, int slot, WireMessage msg);
  void TakePull(int piece, const WireMessage& msg);
  void TakeGoodbye(int local, const WireMessage& msg);
  void ProbeOldEpoch(const WireMessage& msg);
  // Adds the held shares of sums_[slot] in worker order and sends the sum.
  void SendSum(int slot);
  // Refuses each share of `slot` whose payload's CRC-32C (`share_crcs`, from the summing pass, in
  // worker order; a named DENSE share's combined with its table's) is not its header's, and
  // forgets it; false when any was.
  bool RefuseDamagedShares(int slot, const std::vector<uint32_t>& share_crcs);
  // Servers' replies to this aggregator's requests.
  void SumAnswered(const Upstream& up, const WireMessage& reply);
  // False when the copy arrived damaged (the pull stays, to be sent again).
  bool PullAnswered(const Upstream& up, const WireMessage& reply);
  // A refusal of `up` by its server, passed on to the workers waiting for it.
  void PassOnRefusal(uint64_t sequence, const proto::Header& refusal);
  // With cluster.sums_first: tells the servers of this host (their HostLinkBoards) the oldest step
  // of the sums still on their way to other hosts' servers.
  void PublishSumsOnTheirWay();
  // Follows a newer epoch: every sum and copy of the older one is forgotten.
  void EnterEpoch(uint64_t epoch);
  // The piece whose wire range is exactly [begin, end), or -1.
  int PieceOf(uint64_t begin, uint64_t end) const;
  // Where the shares of `part` of `piece` are summed (sums_): a piece's WHOLE or DENSE part at
  // its index, a split piece's ROWS part after every piece's.
  int SlotOf(int piece, proto::PushPart part) const { return part == proto::ROWS ? rows_slot_[piece] : piece; }

  HostAggregatorOptions options_;
  std::unique_ptr<Van> van_;
  std::string endpoint_;
  HostGroups groups_;
  PieceTable table_;
  int threads_ = 1;
  std::vector<ServerScope> scopes_;  // what a worker's message to shard k may be (its checks)
  ClientScope client_scope_;         // what a server's reply may be
  std::map<std::string, int> server_peers_;  // peer name -> shard
  FaultPlan faults_;
  uint64_t epoch_ = 0;
  HostAggregatorStats stats_;
  WorkerAnswers answers_;
  UpstreamRequests upstream_;
  ParameterCopies copies_;
  std::vector<GroupSum> sums_;                // by slot (SlotOf)
  std::vector<int> rows_slot_;                // by piece: the slot of its ROWS part, -1 when not split
  std::vector<int64_t> answered_step_;        // by slot: the last step whose sum the server answered
  std::map<int64_t, int> sums_sent_of_step_;  // for the fault plan: sums sent per step
  std::vector<bool> goodbye_;                 // by the worker's place in the group
  // cluster.sums_first: the boards of this host's servers, the shards on other hosts, and where
  // each shard begins (a sum's place in forward order is its offset within its shard).
  std::vector<std::shared_ptr<HostLinkBoard>> link_boards_;
  std::vector<bool> remote_shards_;
  std::vector<uint64_t> shard_begins_;
  std::optional<Clock::time_point> all_gone_at_;
  Status given_up_;  // set when a server's segment is given up on (UpstreamRequests::SegmentRefused)
  std::atomic<bool> stop_{false};
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_AGGREGATOR_HOST_AGGREGATOR_H_
