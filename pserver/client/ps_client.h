// PsClient: a worker's (or the coordinator's) view of the parameter servers, with a tiny API in
// the manner of ps-lite: Push, Pull, Wait. It hides the sockets, the sharding of the flat vector
// (ShardOf over cluster.servers), the framing of payloads and the checking of replies.
//
//   auto client = PsClient::Create(options);               // connects to every shard
//   PSF_ASSIGN_OR_RETURN(auto pull, client->Pull(0, params.data()));
//   PSF_RETURN_IF_ERROR(client->Wait(pull));                // params now hold the initial values
//   ... compute grad of step 1 ...
//   PSF_ASSIGN_OR_RETURN(auto push, client->Push(1, grad.data(), tokens, loss));
//   PSF_ASSIGN_OR_RETURN(pull, client->Pull(1, params.data()));
//   PSF_RETURN_IF_ERROR(client->Wait(push)); PSF_RETURN_IF_ERROR(client->Wait(pull));
//
// Push and Pull return at once with a ticket; the messages of all shards are in flight together,
// each payload in frames of frame_bytes that ZeroMQ streams while the next is queued.
//
// Pieces (pserver/wire/piece_table.h). With a piece table, the vector travels in pieces: a push
// may be started before backward (BeginPush) and each piece sent as soon as backward reports its
// gradient final (PushReady), and a pull asks for every piece on its own, so each is answered as
// soon as its server has updated it:
//   PSF_ASSIGN_OR_RETURN(auto push, client->BeginPush(t, grad.data(), tokens, loss));
//   model.ForwardBackward(..., [&](uint64_t b, uint64_t e, const StepStats&) { client->PushReady(push, b, e); });
//   PSF_ASSIGN_OR_RETURN(auto pull, client->Pull(t, params.data()));  // pieces answered as updated
//   PSF_RETURN_IF_ERROR(client->Wait(push)); PSF_RETURN_IF_ERROR(client->Wait(pull));
// Ownership: Push sends fp32 gradients straight from `grad` (no copy), so `grad` must stay alive
// and unchanged until Wait(ticket) returns; with BF16 it is converted into the client's own buffer
// and may be reused at once (one already rounded, PushBf16, is sent from the caller's, as fp32
// is). Pull writes into `params` during Wait; keep it alive until then.
// Memory lent in place: a push sent from AllocatePushMemory's memory reaches same-host servers
// without a copy (the Van lends it, shm_van.h); they read it where it lies until their update has
// used it, which may be after Wait. Such memory is written again only after AwaitLentPushes.
// Thread safety: one thread uses a client (its sockets are not thread-safe).
//
// Lost messages and recovery. A part of a request not answered retry_ms after it left this
// process is sent again (then after 2x, 4x, up to 8x retry_ms; Resender, resender.h): a push
// still queued behind a slow link is never sent twice. Servers answer a repeated PULL again and
// ACK a repeated PUSH as a duplicate, so a dropped message or a restarted server costs a delay,
// never an update. Requests carry the client's
// recovery epoch (docs/failure-model.md); when a server refuses one as "other epoch", Wait
// returns Aborted and the caller calls Rollback(), which moves every shard into the newest epoch
// and returns the step the job restarts after. The protocol: docs/wire-protocol.md.
//
// The implementation, by concern: ps_client.cc sends requests, ps_client_replies.cc takes in
// replies (one handler per kind), ps_client_wait.cc waits and resends (when: Resender),
// ps_client_broadcasts.cc holds the requests to every shard (HELLO, ROLLBACK, CHECKPOINT,
// SHUTDOWN).
#ifndef PSFORMER_PSERVER_CLIENT_PS_CLIENT_H_
#define PSFORMER_PSERVER_CLIENT_PS_CLIENT_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/block_crcs.h"
#include "common/param_layout.h"
#include "common/proto/wire.pb.h"
#include "common/transport/van.h"
#include "common/transport/wakeup.h"
#include "pserver/client/pull_landing.h"
#include "pserver/client/resender.h"
#include "pserver/client/segment_refusals.h"
#include "pserver/timing.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/message_validator.h"
#include "pserver/wire/piece_table.h"

namespace psformer {

struct PsClientOptions {
  uint64_t job_id = 0;
  proto::Role role = proto::WORKER;  // WORKER, or COORDINATOR for Checkpoint / Shutdown / final pulls.
  uint32_t id = 0;                   // worker index (0 for the coordinator).
  uint32_t incarnation = 0;          // restart count of this process.
  std::vector<std::string> servers;  // endpoint of shard k at index k.
  // With host summing (common/host_groups.h): the endpoint of this worker's host group's
  // aggregator, which every PUSH and PULL goes to and which answers them for their shards; the
  // other requests still go to the servers. "" = the flat path.
  std::string aggregator;
  uint64_t parameter_count = 0;                  // elements of the flat vector.
  size_t frame_bytes = 1 << 20;                  // payload frame size (cluster.frame_bytes); 0 = one frame.
  proto::DType gradient_dtype = proto::FLOAT32;  // FLOAT32 or BFLOAT16 on the wire.
  int timeout_ms = kRequestTimeoutMs;            // Wait gives up (Unavailable) after this long without completion.
  int retry_ms = 1000;                           // first resend of an unanswered request (cluster.retry_ms).
  // One server's shared-memory segment refused this long (SegmentRefusals::kMinRefusals times at
  // least) ends Wait and Progress with Unavailable naming the segment and what was waited for
  // (segment_refusals.h); the worker passes cluster.heartbeat_timeout_ms. 0 = never.
  int shm_refusal_patience_ms = 0;
  int io_threads = 2;  // ZeroMQ I/O threads (when the client makes its own Van).
  // Threads copying a pulled part into place and checking it, on the client's landing thread
  // (pull_landing.h) while the client's own thread goes on.
  int copy_threads = 1;
  // The job's pieces (JobPieceTable); null = one piece per shard. Servers must use the same.
  std::shared_ptr<const PieceTable> pieces;
  // Whether Wait makes last_pull_digest. A piece pulled in two parts (the split embedding) has no
  // CRC as a whole until its second part's landing makes one, a pass over the piece on the
  // landing thread, in the step's tail; only an emulated GPU reads the digest (it keys its
  // gradients), so a real worker leaves it off.
  bool pull_digest = true;
  // Asked while Hello waits: true gives the wait up (Aborted), so that a process asked to stop
  // before every server answered (one not up yet, or unreachable) does not wait out timeout_ms.
  // Null: never asked.
  std::function<bool()> stop_requested;
};

class PsClient {
  struct CreateKey {};  // only Create builds clients (it must connect them).

 public:
  using Ticket = uint64_t;

  // Connects to every server. `van` = nullptr makes a ZmqVan.
  static StatusOr<std::unique_ptr<PsClient>> Create(PsClientOptions options, std::unique_ptr<Van> van = nullptr);
  PsClient(CreateKey, PsClientOptions options, std::unique_ptr<Van> van);
  ~PsClient();

  // Sends the gradient of `step` (summed over the worker's batch, not yet divided by tokens) to
  // every shard, with the batch's target tokens and summed loss.   grad: (parameter_count)
  StatusOr<Ticket> Push(int64_t step, const float* grad, uint64_t target_tokens, double loss_sum);
  // The same in parts: BeginPush sends nothing; PushReady says grad[begin, end) is final and
  // sends every piece whose elements have all been reported. Reports must not overlap. PushReady
  // takes in no replies: its owner calls Progress (worker/datapath/client_thread.h does, between
  // commands).
  StatusOr<Ticket> BeginPush(int64_t step, const float* grad, uint64_t target_tokens, double loss_sum);
  Status PushReady(Ticket ticket, uint64_t begin, uint64_t end);
  // The same for a gradient already rounded to bf16 (a GPU worker rounds on its device): sent as
  // it is, with no pass over it here; `grad` stays the caller's until Wait, as an fp32 one does.
  // InvalidArgument unless gradient_dtype is BFLOAT16.   grad: (parameter_count)
  StatusOr<Ticket> PushBf16(int64_t step, const uint16_t* grad, uint64_t target_tokens, double loss_sum);
  StatusOr<Ticket> BeginPushBf16(int64_t step, const uint16_t* grad, uint64_t target_tokens, double loss_sum);
  // With pieces pushed in two parts (PieceTable::has_split: the shared embedding's, with
  // cluster.split_embedding), PushReady of the embedding's range sends their DENSE parts (the
  // output projection's gradient, in grad), and PushRows their ROWS parts: the lookups' gradient,
  // rows `rows` (ascending distinct row indices of the embedding, of `width` elements each) with
  // values (rows.size() x width). `values` stays the caller's until Wait, as grad does (with bf16
  // on the wire a rounded copy travels). Once per push; InvalidArgument without split pieces.
  Status PushRows(Ticket ticket, std::span<const int32_t> rows, const float* values, uint64_t width);
  // The same for values already rounded to bf16 (a GPU worker rounds them on its device): sent as
  // they are, with no pass over them here. InvalidArgument unless gradient_dtype is BFLOAT16.
  Status PushRowsBf16(Ticket ticket, std::span<const int32_t> rows, const uint16_t* values, uint64_t width);
  // Names, before the embedding's range is reported (PushReady), the rows PushRows will bring:
  // the DENSE parts carry them, and each server updates every other row of its embedding pieces
  // as soon as every worker's DENSE part is in (docs/wire-protocol.md, "Rows named up front").
  // PushRows must then bring no row outside them. Once per push, and optional: without it a piece
  // is updated once all of its parts are in. Through a host group's aggregator, its sum names the
  // union of what its workers named (when all of them did).
  Status NameRows(Ticket ticket, std::span<const int32_t> rows, uint64_t width);
  // Memory of `bytes` to compute gradients into and push from (64-byte aligned), which the Van
  // lends to same-host servers in place rather than copying each push (Van::AllocatePayload; the
  // heap where it cannot). A push from it stays lent after its Wait until the servers are done
  // with it: AwaitLentPushes before the memory is written again. Freed when the last pointer goes.
  std::shared_ptr<void> AllocatePushMemory(size_t bytes);
  // Waits until every waited-for push from AllocatePushMemory's memory has been given back,
  // taking in replies meanwhile. Unavailable after timeout_ms (a server that holds it for good).
  Status AwaitLentPushes();
  // Takes in every reply that has arrived, waiting up to `timeout_ms` for the first (0: not at
  // all): the pieces of a pull are written to its params as they come, not only during Wait.
  // With a wakeup (WakeWith), the wait also ends once it is notified.
  Status Progress(int timeout_ms = 0);
  // The thread that owns this client also runs work that reaches it another way (a worker's
  // client thread: commands): `wakeup`, notified then by the owner, ends any wait for replies
  // (Progress, Wait) at once, and so does each pulled piece landed (PullLanding), which a Wait
  // no longer polls for. The owner drains it before it looks for its work; Wait drains it too.
  // `wakeup` outlives the client. Before the first request.
  void WakeWith(Wakeup* wakeup);
  // Whether a request is in flight (sent, not yet waited for): replies may be coming.
  bool has_requests() const { return !requests_.empty(); }
  // Whether every part of the ticket's request has been answered (taken in by Progress or Wait);
  // false for a ticket not in flight.
  bool Answered(Ticket ticket) const {
    auto it = requests_.find(ticket);
    return it != requests_.end() && it->second.remaining == 0;
  }
  // How many parts of the ticket's request are answered (a pull's: landed), of how many; {0, 0}
  // for a ticket not in flight. A pull of a split piece has two (SplitParts).
  std::pair<int, int> PartsAnswered(Ticket ticket) const {
    auto it = requests_.find(ticket);
    if (it == requests_.end()) return {0, 0};
    const int parts = static_cast<int>(it->second.parts.size());
    return {parts - it->second.remaining, parts};
  }
  // Asks every shard for the parameters after `step` (0 = initial), written to params during Wait.
  // params: (parameter_count)
  // `dtype` BFLOAT16 asks the servers for bf16-rounded parameters (half the bytes; widened into
  // `params` on arrival).
  // `lend`: a whole piece that arrives as `params` keeps it (fp32 here, bf16 in PullBf16) is
  // checked but not written there: ObserveLandings hands its frames on where they lie
  // (LentParams, pull_landing.h), for a caller that reads it from there (a worker uploading it to
  // its device). Other pieces (split ones, bf16 widened into fp32) are written as without it.
  StatusOr<Ticket> Pull(int64_t step, float* params, proto::DType dtype = proto::FLOAT32, bool lend = false);
  // A BFLOAT16 pull whose pieces land in `params` as they came (bf16, in model order), for a
  // caller that widens them itself (a GPU worker, on its device).   params: (parameter_count)
  StatusOr<Ticket> PullBf16(int64_t step, uint16_t* params, bool lend = false);
  // Calls landed(begin, end, lent) on this thread, in Progress or Wait, for each range of the
  // model that the pull `ticket` has checked and written from now on (a piece pulled in two parts
  // once both are in), and at once for those it already has: so that a forward pass can begin
  // before the whole pull is in. `lent` is set for a piece left where it came (Pull's lend): the
  // range was checked there and not written. Until Wait returns; InvalidArgument for a ticket
  // that is not a pull in flight.
  // For a caller whose device copies only registered memory by DMA (a GPU worker): the Van
  // registers the peers' shared memory it maps with `pin` (Van::PinPeerMemory), and from now on a
  // pull's lend leaves only pieces that lie in memory so registered where they came; the others
  // (over TCP, or where registration failed) are written into the parameters as without lend.
  void PinPeerMemory(Van::PinFn pin);
  // A push's payload that lies in `crcs`'s array is sent with the CRC-32C its writer recorded
  // (common/block_crcs.h: a GPU's, computed beside its copy off the device), reading again only
  // what the record does not cover, instead of checksumming every byte on this client's threads.
  // REQUIRES: `crcs` outlives this client; its writer records as block_crcs.h says.
  void KnowPushCrcs(const BlockCrcs* crcs) { push_crcs_ = crcs; }
  // Push parts sent so far with a CRC that KnowPushCrcs's record knew.
  uint64_t push_parts_known_crc() const { return push_parts_known_crc_; }
  using LandedFn = std::function<void(uint64_t begin, uint64_t end, const std::shared_ptr<const LentParams>& lent)>;
  Status ObserveLandings(Ticket ticket, LandedFn landed);
  // Blocks until every shard has answered the ticket's request. Returns the first ERROR a
  // server sent back (with its reason), Aborted when the job is rolling back (call Rollback), or
  // Unavailable after timeout_ms.
  Status Wait(Ticket ticket);

  // After Wait returned Aborted: brings every shard into the newest recovery epoch heard of
  // (each reloads that epoch's checkpoint), forgets requests in flight, and returns the step the
  // job rolled back to: training continues with step + 1.
  StatusOr<int64_t> Rollback();
  uint64_t epoch() const { return epoch_; }
  int64_t epoch_start() const { return epoch_start_; }  // the checkpoint step epoch() began at.
  // Joins an epoch learned elsewhere (the coordinator's client takes its worker's).
  void SetEpoch(uint64_t epoch, int64_t start) { epoch_ = epoch, epoch_start_ = start; }
  // Seconds the last Wait spent before the first shard answered (for a pull in BSP: waiting for
  // the slowest worker), and in all.
  double last_wait_first_reply_s() const { return last_first_reply_s_; }
  double last_wait_s() const { return last_wait_s_; }
  // BSP: the summed loss and target tokens of every worker's batch of the step the last Wait'ed
  // pull was for (0 tokens: not known), whichever call took in its pieces (Progress or Wait).
  double last_pull_loss_sum() const { return last_pull_loss_sum_; }
  uint64_t last_pull_tokens() const { return last_pull_tokens_; }
  // The CRC-32C of the whole vector the last Wait'ed pull brought, as it travelled (fp32 or
  // bf16 bytes, in model order), combined from its pieces' checked CRCs without a pass over the
  // bytes: the same for any server count and piece table. 0 before any pull, and without
  // PsClientOptions::pull_digest.
  uint32_t last_pull_digest() const { return last_pull_digest_; }

  // Announces this process (incarnation) to every shard; returns the smallest "last pushed step"
  // they report for this worker (where a restarted worker resumes). Shards in different epochs
  // (a recovery under way) are first brought into the newest.
  StatusOr<int64_t> Hello();
  // Coordinator: every shard writes its checkpoint of `step` (waits until all have), or shuts down.
  Status Checkpoint(int64_t step);
  // `last_step` > 0: the job's last step, and every server waits until every worker of the job
  // is done, not only those it heard from (ShutdownTracker::JobEnded); 0: only those.
  Status Shutdown(int64_t last_step = 0);
  // A worker that is done says so (SHUTDOWN as WORKER), so the servers (and its host group's
  // aggregator) can end with the job.
  Status Goodbye();
  // Wait returned Aborted because the coordinator has ended the job (not a rollback).
  bool job_finished() const { return job_finished_; }

  // Pushes the servers recognised as already applied (exactly-once), since creation.
  uint64_t duplicate_acks() const { return duplicate_acks_; }
  // Pulled parts answered since creation: written into the caller's parameters, and left where
  // they came (Pull's lend). The destructor logs both, once any part was pulled.
  uint64_t pulled_parts_written() const { return pulled_parts_written_; }
  uint64_t pulled_parts_lent() const { return pulled_parts_lent_; }
  // Replies refused by validation (counted by reason).
  const RejectCounters& rejected_replies() const { return rejected_; }
  // Whether a wait ended because a server's shared-memory segment kept being refused
  // (shm_refusal_patience_ms): a restart of this process would not mend that.
  bool gave_up_on_segment() const { return !unusable_segment_.ok(); }
  int shards() const { return pieces_->shards(); }
  ShardRange range(int shard) const { return pieces_->shard_range(shard); }
  const PieceTable& pieces() const { return *pieces_; }

 private:
  // A message's sequence names its request and the part of it: replies echo it.
  static constexpr uint64_t kMaxParts = uint64_t{1} << 16;
  static uint64_t SequenceOf(Ticket ticket, int part) { return ticket * kMaxParts + static_cast<uint64_t>(part); }

  // What a request is sent to: a shard, and for PUSH and PULL a run of its pieces.
  struct Part {
    int shard = 0;
    uint64_t begin = 0, end = 0;                // wire range (PieceTable)
    uint64_t model = 0;                         // where [begin, end) lies in the caller's grad and params
    uint64_t reported = 0;                      // PUSH: elements PushReady has reported final
    proto::PushPart piece_part = proto::WHOLE;  // PUSH, PULL: DENSE and ROWS for a split piece
    int piece = 0;                              // ROWS: the piece (PieceTable index)...
    int sibling = -1;                           // PULL of a split piece: the other part's index
    const ElementRun* runs = nullptr;           // ...its run table (in the push's payload)...
    uint32_t run_count = 0;
    bool named = false;           // DENSE PUSH: runs/run_count name the rows (NameRows)
    uint64_t first_value = 0;     // ...and where its values begin in the rows'.
    Resender::Send send;          // PUSH parts go out when their gradient is ready; the others at once
    bool via_aggregator = false;  // sent to the host group's aggregator, not to the shard
    bool landing = false;         // PULL: its reply handed to the landing thread, outcome not yet taken
    bool answered = false;
    std::shared_ptr<const LentParams> lent;  // PULL with lend: the answer, where it lies
    bool sent() const { return send.count() > 0; }
  };
  struct PushPayload;  // what a push's frames keep alive (ps_client.cc)
  struct Request {
    proto::MessageType type = proto::MESSAGE_TYPE_UNSPECIFIED;
    int64_t step = 0;
    uint64_t epoch = 0;                   // the epoch it is sent in (ROLLBACK: the one it enters).
    std::vector<Part> parts;              // Broadcast: one per shard, part k = shard k.
    int remaining = 0;                    // parts not answered
    float* params = nullptr;              // PULL destination...
    uint16_t* params_bf16 = nullptr;      // ...or, for PullBf16, this one.
    double pulled_loss_sum = 0;           // PULL: what its pieces said of the step (BSP)...
    uint64_t pulled_tokens = 0;           // ...0: not said.
    std::vector<uint32_t> part_crcs;      // PULL: each answered part's payload CRC-32C
    LandedFn on_landed;                   // PULL: ObserveLandings'
    bool lend = false;                    // PULL: whole pieces left where they come (Pull's)
    proto::DType dtype = proto::FLOAT32;  // PULL: the element type asked of the servers.
    int64_t min_step = INT64_MAX;         // HELLO: smallest step reported.
    std::vector<uint64_t> epochs;         // HELLO: each shard's epoch...
    std::vector<int64_t> epoch_starts;    // ...and the step it began at.
    Status error;
    // PUSH: what a resend needs. The payload bytes (the caller's grad, or the bf16 copy that
    // payload_owner keeps) stay valid until Finish.
    const float* grad = nullptr;
    const uint16_t* rounded = nullptr;  // the caller's bf16 gradient (BeginPushBf16), sent as it is
    uint16_t* bf16 = nullptr;           // the bf16 copy of grad, filled part by part as they are sent
    PushPayload* payload = nullptr;     // payload_owner's, for the ROWS parts' tables and values
    const void* rows_values = nullptr;  // PushRows' values: fp32, the caller's bf16, or a rounded copy
    bool rows_reported = false;
    std::vector<int32_t> named_rows;  // NameRows'
    bool rows_named = false;
    uint64_t target_tokens = 0;
    double loss_sum = 0;
    std::shared_ptr<const void> payload_owner;  // PUSH: released when the transport is done.
    std::shared_ptr<bool> payload_released;     // set by the owner's deleter (under mutex_).
  };
  static Part MakePart(int shard, uint64_t begin, uint64_t end, uint64_t model);
  // A request's parts per piece run: every piece (PUSH, PULL) or one per shard (the rest).
  std::vector<Part> PieceParts() const;
  // A push's and a pull's: PieceParts, a split piece's as its DENSE part, then a ROWS part per
  // split piece (the two siblings).
  std::vector<Part> SplitParts() const;
  // PushRows of fp32 `values` or of bf16 `rounded` ones (the other null).
  Status PushRowsOf(Ticket ticket, std::span<const int32_t> rows, const float* values, const uint16_t* rounded,
                    uint64_t width);
  // Rows a push may name or bring: ascending, distinct, inside the embedding (`width` each).
  Status CheckRows(const Request& r, std::span<const int32_t> rows, uint64_t width) const;
  std::vector<Part> ShardParts() const;
  Request& NewRequest(Ticket ticket, proto::MessageType type, int64_t step, std::vector<Part> parts);
  // Pull into fp32 `params` or, as they came, into bf16 `params_bf16` (the other null).
  StatusOr<Ticket> PullInto(int64_t step, float* params, uint16_t* params_bf16, proto::DType dtype, bool lend);
  // BeginPush of an fp32 `grad` or of a bf16 `rounded` one (the other null).
  StatusOr<Ticket> BeginPushOf(int64_t step, const float* grad, const uint16_t* rounded, uint64_t target_tokens,
                               double loss_sum);
  proto::Header RequestHeader(proto::MessageType type, int shard, int64_t step, uint64_t sequence) const;
  StatusOr<Ticket> Broadcast(proto::MessageType type, int64_t step, proto::DType dtype = proto::FLOAT32);
  // Sends part `part` of the request; its sequence names both (SequenceOf).
  Status SendPart(Ticket ticket, Request& r, int part);
  // Takes in one reply: validates it, finds its request and part, and dispatches by type to the
  // handlers below, each of which returns whether the part is now answered.
  void HandleReply(RawMessage raw);
  bool HandleRefusal(const proto::Header& h, Request& r);
  // PARAMS: handed to the landing thread (answered once landed: TakeLandings).
  bool HandleParams(WireMessage msg, Request& r, Part& p);
  // The landing thread's outcomes: an intact part is answered, a damaged one asked for again.
  void TakeLandings();
  // Calls r.on_landed for p's range once every part of its piece is answered.
  void ReportLanded(const Request& r, const Part& p);
  // What a landed part says (its CRC, the step's loss and tokens); false when it was damaged.
  bool TookLanded(Request& r, const Part& p, const PullLanding::Landed& landed);
  // Waits for the landings of r's parts still in flight, before r is dropped or handed back.
  void SettleLandings(const Request& r);
  bool HandleAck(const proto::Header& h, Request& r);
  // Sends again the parts of `r` that the Resender finds due at `now`.
  Status ResendDue(Ticket ticket, Request& r, std::chrono::steady_clock::time_point now);
  // The Status of a Finish that ran out of time: the shards still silent, named.
  Status NoAnswer(const Request& r, int limit_ms, bool grace) const;
  // "PULL of step 3 from shard(s) 0, 1": what `r` still waits for.
  std::string Awaited(const Request& r) const;
  // A reply refused because its payload's shared-memory segment could not be read: counted
  // against that segment (SegmentRefusals); past the bound, unusable_segment_ says why.
  void SegmentRefused(const std::string& segment, const std::string& why);
  // Wait, handing the finished request to the caller (Hello reads its answer). `grace_ms` > 0:
  // give up after that long and report success (a SHUTDOWN whose ACK is lost with its server).
  Status Finish(Ticket ticket, Request* done, int grace_ms = 0);
  // Drops the request's hold on its payload and waits, taking in replies, until the transport
  // has let go of it too (ZeroMQ sent it; a lent frame's receiver released it), so that the
  // caller may write the memory again. Unavailable after timeout_ms.
  Status ReleasePayload(Request* r);
  // Whether any of `r`'s payload (its gradient, its rows' values) lies in AllocatePushMemory's
  // memory (lent in place, given back late).
  bool FromPushMemory(const Request& r) const;
  // Moves every shard into `epoch` (begun at `start`), following any newer epoch a shard names.
  Status EnterEpoch(uint64_t epoch, int64_t start);

  PsClientOptions options_;
  Resender resender_;
  std::unique_ptr<Van> van_;
  ClientScope scope_;
  std::shared_ptr<const PieceTable> pieces_;
  std::map<Ticket, Request> requests_;
  std::vector<Request> retired_;  // aborted pushes whose frames may still be in the transport.
  std::vector<Request> on_loan_;  // waited-for pushes from push memory not yet given back.
  struct PushMemory {
    const char* begin;
    size_t bytes;
    std::weak_ptr<void> alive;
  };
  std::vector<PushMemory> push_memory_;  // what AllocatePushMemory handed out
  Ticket next_ticket_ = 1;
  uint64_t duplicate_acks_ = 0;
  bool lend_pinned_only_ = false;         // PinPeerMemory's
  const BlockCrcs* push_crcs_ = nullptr;  // KnowPushCrcs's, or null
  Wakeup* wakeup_ = nullptr;              // WakeWith's, or null
  uint64_t push_parts_known_crc_ = 0;     // push parts sent with a CRC push_crcs_ knew
  uint64_t pulled_parts_written_ = 0;
  uint64_t pulled_parts_lent_ = 0;
  uint64_t epoch_ = 0;
  int64_t epoch_start_ = 0;
  bool job_finished_ = false;
  bool rollback_pending_ = false;  // a shard refused a request as "other epoch"...
  uint64_t rollback_epoch_ = 0;    // ...naming this epoch...
  int64_t rollback_start_ = 0;     // ...begun at this step.
  double last_first_reply_s_ = 0, last_wait_s_ = 0;
  double last_pull_loss_sum_ = 0;
  uint64_t last_pull_tokens_ = 0;
  uint32_t last_pull_digest_ = 0;
  RejectCounters rejected_;
  SegmentRefusals segment_refusals_;
  Status unusable_segment_;  // set once a segment is given up on; Wait and Progress return it
  // Payload owners are released on a ZeroMQ I/O thread; this pair hands that back to Wait.
  std::shared_ptr<std::mutex> release_mutex_;
  std::shared_ptr<std::condition_variable> release_cv_;
  // Last, so destroyed first: the piece it is landing finishes (the rest are dropped) while the
  // Van whose frames it reads is still there.
  std::unique_ptr<PullLanding> landing_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_CLIENT_PS_CLIENT_H_
