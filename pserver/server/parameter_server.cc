#include "pserver/server/parameter_server.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "common/role_threads.h"
#include "common/trace.h"
#include "pserver/timing.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace {

int UpdateThreads(const ParameterServerOptions& o) {
  return o.threads > 0 ? o.threads : ServerPayloadThreads(o.config);
}

// Where the shard's pieces begin, as offsets in the shard.
std::vector<uint64_t> ShardPieceStarts(const ParameterServerOptions& o) {
  const PieceTable table = JobPieceTable(o.config, o.parameter_count, o.layer_starts);
  const uint64_t base = table.shard_range(o.shard).begin;
  std::vector<uint64_t> starts;
  for (int p = table.FirstOf(o.shard); p < table.EndOf(o.shard); ++p) starts.push_back(table.pieces()[p].begin - base);
  return starts;
}

// Per piece of the shard: 1 where it is pushed in two parts (PieceTable's split).
std::vector<uint8_t> ShardSplitPieces(const ParameterServerOptions& o) {
  const PieceTable table = JobPieceTable(o.config, o.parameter_count, o.layer_starts);
  std::vector<uint8_t> split;
  for (int p = table.FirstOf(o.shard); p < table.EndOf(o.shard); ++p) split.push_back(table.pieces()[p].split ? 1 : 0);
  return split;
}

CheckpointIdentity IdentityOf(const ParameterServerOptions& o) {
  return CheckpointIdentity{o.config.cluster().servers(), o.parameter_count, o.config_digest,
                            JobPieceTable(o.config, o.parameter_count, o.layer_starts).spread(),
                            HostGroups::Of(o.config).sizes()};
}

}  // namespace

ParameterServer::ParameterServer(CreateKey, ParameterServerOptions options, std::unique_ptr<Van> van)
    : options_(std::move(options)),
      van_(std::move(van)),
      range_(ShardOf(options_.parameter_count, options_.config.cluster().servers(), options_.shard)),
      piece_starts_(ShardPieceStarts(options_)),
      split_pieces_(ShardSplitPieces(options_)),
      // Snapshots in the Van's memory: shared memory on the same-host path, lent to replies in place.
      optimizer_(options_.config, range_.begin, range_.end, UpdateThreads(options_), piece_starts_,
                 [van = van_.get()](size_t bytes) { return van->AllocatePayload(bytes); }),
      policy_(MakeConsistencyPolicy(options_.config, range_, UpdateThreads(options_), piece_starts_, split_pieces_)),
      checkpointer_(options_.run_dir, IdentityOf(options_), options_.shard, options_.config.checkpoint().keep_last()),
      shutdown_(options_.config.cluster().workers(), options_.config.cluster().retry_ms(),
                (range_.end - range_.begin) * sizeof(float)),
      replies_(van_.get(), options_.job_id, options_.shard, &epoch_, &stats_.rejected),
      groups_(HostGroups::Of(options_.config)),
      incarnations_(options_.config.cluster().workers(), 0),
      aggregator_incarnations_(groups_.count(), 0),
      faults_(options_.config.fault(), FaultEvent::SERVER, options_.shard, options_.incarnation, options_.shm_faults) {
  scope_.job_id = options_.job_id;
  scope_.workers = options_.config.cluster().workers();
  scope_.aggregators = groups_.count();
  scope_.threads = UpdateThreads(options_);
  scope_.shard = options_.shard;
  scope_.begin = range_.begin;
  scope_.end = range_.end;
  for (uint64_t start : piece_starts_) scope_.piece_bounds.push_back(range_.begin + start);
  scope_.piece_bounds.push_back(range_.end);
  scope_.split_pieces = split_pieces_;
  progress_.worker_steps.assign(options_.config.cluster().workers(), 0);
  int slots = static_cast<int>(piece_starts_.size());
  for (uint8_t split : split_pieces_) rows_slot_.push_back(split != 0 ? slots++ : -1);
  heard_.assign(pushers(), std::vector<bool>(slots, false));
  heard_count_.assign(pushers(), 0);
}

int64_t ParameterServer::LastPushed(int pusher) const {
  // A group's workers are recorded together, so its first one speaks for all.
  return progress_.worker_steps[groups_.summing() ? groups_.first(pusher) : pusher];
}

void ParameterServer::SetPushed(int pusher, int64_t step) {
  if (!groups_.summing()) {
    progress_.worker_steps[pusher] = step;
    return;
  }
  for (int w = groups_.first(pusher); w < groups_.first(pusher) + groups_.size(pusher); ++w) {
    progress_.worker_steps[w] = step;
  }
}

ParameterServer::~ParameterServer() = default;

StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(ParameterServerOptions options,
                                                                   std::unique_ptr<Van> van) {
  const int servers = options.config.cluster().servers();
  if (options.shard < 0 || options.shard >= servers) {
    return Status::InvalidArgument("server index " + std::to_string(options.shard) + " is outside 0.." +
                                   std::to_string(servers - 1) + " (cluster.servers = " + std::to_string(servers) +
                                   ")");
  }
  if (options.parameter_count < static_cast<uint64_t>(servers)) {
    return Status::InvalidArgument("cannot split " + std::to_string(options.parameter_count) + " parameters into " +
                                   std::to_string(servers) + " shards");
  }
  auto server = std::make_unique<ParameterServer>(CreateKey{}, std::move(options), std::move(van));
  PSF_RETURN_IF_ERROR(server->Start());
  return server;
}

Status ParameterServer::Start() {
  const bool restarted = options_.incarnation > 0;
  bool resumed = false;
  if ((options_.resume || restarted) && checkpointer_.enabled()) {
    PSF_ASSIGN_OR_RETURN(auto loaded, checkpointer_.LoadNewest());
    if (loaded.has_value()) {
      if (loaded->worker_steps.size() != progress_.worker_steps.size()) {
        return Status::InvalidArgument("checkpoint at step " + std::to_string(loaded->step) + " was written with " +
                                       std::to_string(loaded->worker_steps.size()) + " workers, this job has " +
                                       std::to_string(progress_.worker_steps.size()));
      }
      progress_.applied_step = loaded->step;
      written_step_ = loaded->step;
      progress_.worker_steps = loaded->worker_steps;
      PSF_LOG(Info) << "shard " << options_.shard << " resumes from the checkpoint of step " << loaded->step;
      optimizer_.Restore(std::move(loaded).value());
      resumed = true;
    } else {
      PSF_LOG(Info) << "shard " << options_.shard << ": no checkpoint to resume from; starting fresh";
    }
  }
  if (!resumed) Initialize();
  epoch_.Enter(0, progress_.applied_step);
  if (restarted) {
    // This shard lost the updates since its checkpoint: the whole job rolls back to it.
    epoch_.Enter(TakeRecoveryEpoch(options_.run_dir, options_.shard, options_.incarnation), progress_.applied_step);
    PSF_LOG(Warning) << "shard " << options_.shard << " restarted (incarnation " << options_.incarnation
                     << "): recovery epoch " << epoch_.epoch() << ", the job rolls back to step "
                     << epoch_.start_step();
  }
  PublishProgress();
  policy_->Restart(progress_.applied_step);
  PSF_ASSIGN_OR_RETURN(endpoint_, van_->Bind(options_.endpoint));
  PSF_LOG(Info) << "shard " << options_.shard << " [" << range_.begin << ", " << range_.end << ") serving at "
                << endpoint_ << "; " << UpdateThreads(options_) << " thread(s) for its sums, updates and checksums";
  return Status::Ok();
}

void ParameterServer::Initialize() {
  if (options_.init) {
    // The shard's elements in wire order; init speaks of model ranges (a spread table's differ).
    const PieceTable table = JobPieceTable(options_.config, options_.parameter_count, options_.layer_starts);
    const uint64_t begin = range_.begin;
    optimizer_.Initialize([&](uint64_t b, uint64_t e, float* out) {
      table.ForEachModelRun(begin + b, begin + e,
                            [&](uint64_t mb, uint64_t me, uint64_t offset) { options_.init(mb, me, out + offset); });
    });
  } else {
    optimizer_.Initialize([](uint64_t b, uint64_t e, float* out) { std::fill(out, out + (e - b), 0.0f); });
  }
}

void ParameterServer::PublishProgress() {
  stats_.applied_step.store(progress_.applied_step);
  stats_.updates.store(optimizer_.updates());
}

void ParameterServer::PublishQueues() {
  stats_.pending_pulls.store(pending_pulls_.size());
  uint64_t held = 0;  // a worker's pushes past the applied step are held (only BSP holds any)
  for (int64_t step : progress_.worker_steps)
    held += static_cast<uint64_t>(std::max<int64_t>(0, step - progress_.applied_step));
  stats_.pending_pushes.store(held);
}

Status ParameterServer::Run() {
  while (!stop_.load()) {
    auto received = van_->Recv(options_.poll_ms);
    if (!received.ok()) return received.status().WithContext("shard " + std::to_string(options_.shard));
    if (received->has_value()) Handle(std::move(**received));
    PublishQueues();
    if (!fatal_.ok()) return fatal_;
    const auto now = ShutdownTracker::Clock::now();
    if (shutdown_.ShouldStop(now)) {
      stop_.store(true);
    } else if (shutdown_.Overdue(now)) {
      PSF_LOG(Warning) << "shard " << options_.shard << ": not every worker said it was done within "
                       << kServerFinishDeadline.count() << " s of the job's end; stopping anyway";
      stop_.store(true);
    }
  }
  PSF_LOG(Info) << "shard " << options_.shard << " stops after step " << progress_.applied_step
                << "; pulls answered: " << stats_.pulls_answered.load() << " (" << stats_.bf16_pulls_answered.load()
                << " in bf16); duplicate pushes: " << stats_.duplicates.load()
                << "; refused messages: " << stats_.rejected.ToString();
  return Status::Ok();
}

void ParameterServer::Handle(RawMessage raw) {
  const TraceSpan traced("handle");
  WireMessage msg;
  const std::string peer = raw.peer;
  if (Refusal v = ParseMessage(std::move(raw), &msg)) return replies_.Refuse(peer, nullptr, *v);
  const proto::Header& h = msg.header;
  if (Refusal v = ValidateAtServer(msg, scope_)) return replies_.Refuse(peer, &h, *v);
  if (Refusal v = CheckIncarnation(h)) return replies_.Refuse(peer, &h, *v);
  const bool from_worker = h.sender_role() == proto::WORKER;
  if (from_worker) shutdown_.Heard(static_cast<int>(h.sender_id()));
  if (from_worker && shutdown_.job_ended() && (h.type() == proto::PUSH || h.type() == proto::PULL)) {
    return RefuseJobFinished(peer, h);
  }
  if (Refusal v = epoch_.Check(h)) return replies_.Refuse(peer, &h, *v);
  switch (h.type()) {
    case proto::ROLLBACK:
      return HandleRollback(msg);
    case proto::PUSH:
      return HandlePush(std::move(msg));
    case proto::PULL:
      return HandlePull(msg);
    case proto::CHECKPOINT:
      return HandleCheckpoint(msg);
    case proto::HELLO:
      return HandleHello(msg);
    case proto::HEARTBEAT:
      return replies_.Answer(msg.peer, h, proto::HEARTBEAT);
    case proto::SHUTDOWN:
      return HandleShutdown(msg);
    default:
      PSF_CHECK(false && "validated types are all handled");
  }
}

Refusal ParameterServer::CheckIncarnation(const proto::Header& h) {
  const bool worker = h.sender_role() == proto::WORKER;
  if (!worker && h.sender_role() != proto::AGGREGATOR) return std::nullopt;
  uint32_t& known = (worker ? incarnations_ : aggregator_incarnations_)[h.sender_id()];
  const std::string who = (worker ? "worker " : "aggregator of host group ") + std::to_string(h.sender_id());
  if (h.incarnation() < known) {
    return Rejection{RejectReason::kStaleIncarnation,
                     who + " incarnation " + std::to_string(h.incarnation()) + ", already seen " + std::to_string(known)};
  }
  if (h.incarnation() > known) {
    PSF_LOG(Info) << who << " is now incarnation " << h.incarnation();
    known = h.incarnation();
  }
  return std::nullopt;
}

// Answered in any epoch, with the last step the worker pushed: where a restarted worker resumes.
void ParameterServer::HandleHello(const WireMessage& msg) {
  proto::Header h = replies_.Header(msg.header, proto::ACK);
  if (msg.header.sender_role() == proto::WORKER) h.set_step(progress_.worker_steps[msg.header.sender_id()]);
  replies_.Send(msg.peer, std::move(h));
}

void ParameterServer::HandlePush(WireMessage msg) {
  const proto::Header& h = msg.header;
  const int w = static_cast<int>(h.sender_id());  // the pusher: a worker or a host group (validated)
  const int64_t step = h.step();
  const int64_t last = LastPushed(w);
  // The pieces the push covers (the validator checked it names whole pieces of this shard).
  const auto piece_at = [this](uint64_t x) {
    return static_cast<int>(std::lower_bound(scope_.piece_bounds.begin(), scope_.piece_bounds.end(), x) -
                            scope_.piece_bounds.begin());
  };
  const int first = piece_at(h.begin()), end = piece_at(h.end());
  bool all_heard = step == last + 1;
  for (int p = first; p < end && all_heard; ++p) all_heard = heard_[w][HeardSlot(p, h.part())];
  if (step <= last || all_heard) {
    // Exactly once: a retry or replay of a push already applied or held.
    stats_.duplicates.fetch_add(1);
    return replies_.Answer(msg.peer, h, proto::ACK, /*duplicate=*/true);
  }
  if (step > last + 1) {
    return replies_.Refuse(
        msg.peer, &h,
        {RejectReason::kFutureStep, "push of step " + std::to_string(step) + " from " +
                                        (groups_.summing() ? "host group " : "worker ") + std::to_string(w) +
                                        " whose last push was step " + std::to_string(last)});
  }
  if (policy_->PushTooEarly(step, progress_)) {
    return replies_.Refuse(msg.peer, &h,
                           {RejectReason::kFutureStep, "push of step " + std::to_string(step) +
                                                           " before the parameters it needs exist (last applied step " +
                                                           std::to_string(progress_.applied_step) + ")"});
  }
  if (const std::string why = policy_->Inconsistent(w, msg); !why.empty()) {
    return replies_.Refuse(msg.peer, &h, {RejectReason::kBadPayload, why});
  }
  stats_.pushes_accepted.fetch_add(1);
  replies_.Answer(msg.peer, h);
  const auto take_start = std::chrono::steady_clock::now();
  Trace::AtStep(step);
  {
    const TraceSpan traced("take_push", step, static_cast<int64_t>(h.begin()));
    TakePieces(w, first, end, std::move(msg));
  }
  stats_.update_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - take_start).count());
  ServePendingPulls();
  ServePendingCheckpoints();
}

int ParameterServer::TakePieces(int w, int first, int last, WireMessage msg) {
  int taken = 0;
  const int64_t step = msg.header.step();
  for (int p = first; p < last; ++p) {
    const int slot = HeardSlot(p, msg.header.part());
    if (heard_[w][slot]) continue;  // a retry covering pieces held already
    heard_[w][slot] = true;
    ++taken;
    const uint64_t begin = scope_.piece_bounds[p], end = scope_.piece_bounds[p + 1];
    WireMessage piece = first + 1 == last ? std::move(msg) : SliceMessage(msg, begin, end);
    if (++heard_count_[w] == static_cast<int>(heard_[w].size())) {
      // Every piece of this worker's step is in: the step counts as pushed.
      SetPushed(w, step);
      std::fill(heard_[w].begin(), heard_[w].end(), false);
      heard_count_[w] = 0;
    }
    if (std::optional<AppliedUpdate> update = policy_->Accept(w, std::move(piece), &optimizer_)) Applied(*update);
  }
  return taken;
}

void ParameterServer::Applied(const AppliedUpdate& update) {
  if (!update.outside_pass) stats_.pieces_applied.fetch_add(1);
  if (update.partial) {
    next_loss_sum_ = update.loss_sum;
    next_tokens_ = update.target_tokens;
    return;
  }
  progress_.applied_step = std::max(progress_.applied_step, update.step);
  PublishProgress();
  if (!update.whole_step) return;
  applied_loss_sum_ = update.loss_sum;
  applied_tokens_ = update.target_tokens;
  const int every = options_.config.checkpoint().every_steps();
  if (every > 0 && update.step % every == 0 && checkpointer_.enabled()) {
    const Status s = WriteCheckpoint(update.step);
    if (!s.ok()) PSF_LOG(Error) << "checkpoint of step " << update.step << " failed: " << s.message();
  }
  faults_.KillOrStallAt(update.step);  // injected faults strike after a step is applied (and checkpointed)
}

void ParameterServer::HandleShutdown(const WireMessage& msg) {
  const proto::Header& h = msg.header;
  replies_.Answer(msg.peer, h);
  const auto now = ShutdownTracker::Clock::now();
  if (h.sender_role() == proto::WORKER) return shutdown_.WorkerSaidGoodbye(static_cast<int>(h.sender_id()), now);
  if (!shutdown_.job_ended()) PSF_LOG(Info) << "shard " << options_.shard << ": the coordinator ended the job";
  shutdown_.JobEnded(now, /*every_worker=*/h.step() > 0);
  // Workers still waiting (SSP and async stop at different steps) learn it now.
  pending_pulls_.DropAll([this](const PendingRequests::Entry& e) {
    if (e.request.sender_role() == proto::WORKER) RefuseJobFinished(e.peer, e.request);
  });
}

void ParameterServer::RefuseJobFinished(const std::string& peer, const proto::Header& request) {
  replies_.Refuse(peer, &request, {RejectReason::kJobFinished, "the coordinator has ended the job"});
  shutdown_.WorkerToldJobFinished(static_cast<int>(request.sender_id()), ShutdownTracker::Clock::now());
}

}  // namespace psformer
