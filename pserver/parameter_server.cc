#include "pserver/parameter_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/logging.h"
#include "common/transport/frame.h"

namespace psformer {
namespace {

int UpdateThreads(const ParameterServerOptions& o) {
  if (o.threads > 0) return o.threads;
  if (o.config.cluster().threads_per_process() > 0) return o.config.cluster().threads_per_process();
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ParameterServer::ParameterServer(CreateKey, ParameterServerOptions options, std::unique_ptr<Van> van)
    : options_(std::move(options)),
      van_(std::move(van)),
      range_(ShardOf(options_.parameter_count, options_.config.cluster().servers(), options_.shard)),
      mode_(options_.config.cluster().consistency()),
      optimizer_(options_.config, range_.begin, range_.end, UpdateThreads(options_)),
      aggregator_(mode_ == proto::ClusterConfig::BSP ? options_.config.cluster().workers() : 0,
                  mode_ == proto::ClusterConfig::BSP ? range_.size() : 0, UpdateThreads(options_)),
      worker_steps_(options_.config.cluster().workers(), 0),
      incarnations_(options_.config.cluster().workers(), 0),
      workers_done_(options_.config.cluster().workers(), false),
      workers_seen_(options_.config.cluster().workers(), false),
      faults_(options_.config.fault(), FaultEvent::SERVER, options_.shard, options_.incarnation) {
  scope_.job_id = options_.job_id;
  scope_.workers = options_.config.cluster().workers();
  scope_.threads = UpdateThreads(options_);
  scope_.shard = options_.shard;
  scope_.begin = range_.begin;
  scope_.end = range_.end;
}

ParameterServer::~ParameterServer() = default;

StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(ParameterServerOptions options,
                                                                   std::unique_ptr<Van> van) {
  const int servers = options.config.cluster().servers();
  if (options.shard < 0 || options.shard >= servers) {
    return Status::InvalidArgument("server index " + std::to_string(options.shard) + " is outside 0.." +
                                   std::to_string(servers - 1) + " (cluster.servers = " + std::to_string(servers) + ")");
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
  const CheckpointIdentity id{options_.config.cluster().servers(), options_.parameter_count, options_.config_digest};
  const bool restarted = options_.incarnation > 0;
  bool resumed = false;
  if ((options_.resume || restarted) && !options_.run_dir.empty()) {
    PSF_ASSIGN_OR_RETURN(auto loaded, LoadNewestShardCheckpoint(options_.run_dir, id, options_.shard));
    if (loaded.has_value()) {
      if (loaded->worker_steps.size() != worker_steps_.size()) {
        return Status::InvalidArgument("checkpoint at step " + std::to_string(loaded->step) + " was written with " +
                                       std::to_string(loaded->worker_steps.size()) + " workers, this job has " +
                                       std::to_string(worker_steps_.size()));
      }
      applied_step_ = loaded->step;
      worker_steps_ = loaded->worker_steps;
      PSF_LOG(Info) << "shard " << options_.shard << " resumes from the checkpoint of step " << applied_step_;
      optimizer_.Restore(std::move(loaded).value());
      resumed = true;
    } else {
      PSF_LOG(Info) << "shard " << options_.shard << ": no checkpoint to resume from; starting fresh";
    }
  }
  if (!resumed) Initialize();
  restored_step_ = applied_step_;
  if (restarted) {
    epoch_ = NewEpoch();
    PSF_LOG(Warning) << "shard " << options_.shard << " restarted (incarnation " << options_.incarnation
                     << "): recovery epoch " << epoch_ << ", the job rolls back to step " << restored_step_;
  }
  stats_.applied_step.store(applied_step_);
  stats_.updates.store(optimizer_.updates());
  if (mode_ == proto::ClusterConfig::BSP) aggregator_.Begin(applied_step_ + 1);
  PSF_ASSIGN_OR_RETURN(endpoint_, van_->Bind(options_.endpoint));
  PSF_LOG(Info) << "shard " << options_.shard << " [" << range_.begin << ", " << range_.end << ") serving at "
                << endpoint_;
  return Status::Ok();
}

void ParameterServer::Initialize() {
  if (options_.init) {
    const uint64_t begin = range_.begin;
    optimizer_.Initialize([&](uint64_t b, uint64_t e, float* out) { options_.init(begin + b, begin + e, out); });
  } else {
    optimizer_.Initialize([](uint64_t b, uint64_t e, float* out) { std::fill(out, out + (e - b), 0.0f); });
  }
}

// Epochs must grow across every server of the job, whichever restarts: the run directory holds
// one empty file per epoch taken, created exclusively, so two servers never take the same one.
uint64_t ParameterServer::NewEpoch() const {
  if (options_.run_dir.empty()) {
    // Only embedded servers have no run directory; their epochs are unique per (shard, restart).
    return static_cast<uint64_t>(options_.incarnation) * 1024 + static_cast<uint64_t>(options_.shard) + 1;
  }
  const std::filesystem::path dir = std::filesystem::path(options_.run_dir) / "checkpoints" / "epochs";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (uint64_t e = 1;; ++e) {
    const std::string path = (dir / std::to_string(e)).string();
    const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd >= 0) {
      close(fd);
      return e;
    }
    if (errno != EEXIST) {
      PSF_LOG(Error) << "cannot record recovery epoch in " << path << ": " << strerror(errno);
      return static_cast<uint64_t>(options_.incarnation) * 1024 + static_cast<uint64_t>(options_.shard) + 1;
    }
  }
}

Status ParameterServer::Run() {
  while (!stop_.load()) {
    auto received = van_->Recv(options_.poll_ms);
    if (!received.ok()) return received.status().WithContext("shard " + std::to_string(options_.shard));
    if (received->has_value()) Handle(std::move(**received));
    if (!fatal_.ok()) return fatal_;
    if (stop_scheduled_ && std::chrono::steady_clock::now() >= stop_at_) stop_.store(true);
    if (finishing_ && !stop_.load() && std::chrono::steady_clock::now() > finish_deadline_) {
      PSF_LOG(Warning) << "shard " << options_.shard << ": not every worker said it was done within 60 s of the "
                       << "job's end; stopping anyway";
      stop_.store(true);
    }
  }
  PSF_LOG(Info) << "shard " << options_.shard << " stops after step " << applied_step_
                << "; pulls answered: " << stats_.pulls_answered.load() << " (" << stats_.bf16_pulls_answered.load()
                << " in bf16); duplicate pushes: " << stats_.duplicates.load() << "; refused messages: "
                << stats_.rejected.ToString();
  return Status::Ok();
}

void ParameterServer::Handle(RawMessage raw) {
  WireMessage msg;
  const std::string peer = raw.peer;
  if (Verdict v = ParseMessage(std::move(raw), &msg)) return Refuse(peer, nullptr, *v);
  if (Verdict v = ValidateAtServer(msg, scope_)) return Refuse(peer, &msg.header, *v);
  if (Verdict v = CheckIncarnation(msg.header)) return Refuse(peer, &msg.header, *v);
  if (msg.header.sender_role() == proto::WORKER) workers_seen_[msg.header.sender_id()] = true;
  if (finishing_ && msg.header.sender_role() == proto::WORKER &&
      (msg.header.type() == proto::PUSH || msg.header.type() == proto::PULL)) {
    told_finished_ = true;
    Refuse(peer, &msg.header, {RejectReason::kJobFinished, "the coordinator has ended the job"});
    return MarkWorkerDone(static_cast<int>(msg.header.sender_id()));
  }
  if (Verdict v = CheckEpoch(msg.header)) return Refuse(peer, &msg.header, *v);
  switch (msg.header.type()) {
    case proto::ROLLBACK: return HandleRollback(std::move(msg));
    case proto::PUSH: return HandlePush(std::move(msg));
    case proto::PULL: return HandlePull(std::move(msg));
    case proto::CHECKPOINT: return HandleCheckpoint(std::move(msg));
    case proto::HELLO: {
      proto::Header h = ReplyHeader(msg.header, proto::ACK);
      if (msg.header.sender_role() == proto::WORKER) h.set_step(worker_steps_[msg.header.sender_id()]);
      van_->Send(EncodeMessage(msg.peer, h, {})).ok();
      return;
    }
    case proto::HEARTBEAT: return Reply(msg.peer, msg.header, proto::HEARTBEAT);
    case proto::SHUTDOWN: return HandleShutdown(std::move(msg));
    default: PSF_CHECK(false && "validated types are all handled");
  }
}

Verdict ParameterServer::CheckIncarnation(const proto::Header& h) {
  if (h.sender_role() != proto::WORKER) return std::nullopt;
  uint32_t& known = incarnations_[h.sender_id()];
  if (h.incarnation() < known) {
    return Rejection{RejectReason::kStaleIncarnation, "worker " + std::to_string(h.sender_id()) + " incarnation " +
                                                          std::to_string(h.incarnation()) + ", already seen " +
                                                          std::to_string(known)};
  }
  if (h.incarnation() > known) {
    PSF_LOG(Info) << "worker " << h.sender_id() << " is now incarnation " << h.incarnation();
    known = h.incarnation();
  }
  return std::nullopt;
}

void ParameterServer::HandleShutdown(WireMessage msg) {
  const proto::Header& h = msg.header;
  Reply(msg.peer, h, proto::ACK);
  if (h.sender_role() == proto::WORKER) return MarkWorkerDone(static_cast<int>(h.sender_id()));
  if (!finishing_) {
    PSF_LOG(Info) << "shard " << options_.shard << ": the coordinator ended the job";
    finish_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  }
  finishing_ = true;
  // Workers still waiting (SSP/async stop at different steps) learn it now.
  for (const PendingPull& p : pending_pulls_) {
    if (p.request.sender_role() == proto::WORKER) {
      told_finished_ = true;
      Refuse(p.peer, &p.request, {RejectReason::kJobFinished, "the coordinator has ended the job"});
      MarkWorkerDone(static_cast<int>(p.request.sender_id()));
    }
  }
  pending_pulls_.clear();
  MarkWorkerDone(-1);
}

// Records that `worker` is done (-1: nobody new) and ends Run once the job is over for all.
void ParameterServer::MarkWorkerDone(int worker) {
  if (worker >= 0) workers_done_[worker] = true;
  bool all_done = true;
  for (size_t w = 0; w < workers_done_.size(); ++w) all_done = all_done && (workers_done_[w] || !workers_seen_[w]);
  if (!finishing_ || !all_done) return;
  if (!told_finished_) {
    stop_.store(true);
  } else if (!stop_scheduled_) {
    // Long enough for a worker whose "job finished" was lost to retry once more (PsClient backs
    // off to 8 x retry_ms).
    stop_scheduled_ = true;
    stop_at_ = std::chrono::steady_clock::now() +
               std::chrono::milliseconds(8 * options_.config.cluster().retry_ms() + 1000);
  }
}

Verdict ParameterServer::CheckEpoch(const proto::Header& h) const {
  const proto::MessageType t = h.type();
  if (t != proto::PUSH && t != proto::PULL && t != proto::CHECKPOINT && t != proto::ROLLBACK) return std::nullopt;
  // A ROLLBACK into a newer epoch is what recovery needs; into this one it is a repeat.
  if (t == proto::ROLLBACK ? h.epoch() >= epoch_ : h.epoch() == epoch_) return std::nullopt;
  return Rejection{RejectReason::kOtherEpoch, proto::MessageType_Name(t) + " of recovery epoch " +
                                                  std::to_string(h.epoch()) + "; this shard is in epoch " +
                                                  std::to_string(epoch_) + ", which began at step " +
                                                  std::to_string(restored_step_)};
}

void ParameterServer::HandleRollback(WireMessage msg) {
  const proto::Header& h = msg.header;
  if (h.epoch() > epoch_) {
    PSF_LOG(Warning) << "shard " << options_.shard << ": rolling back from step " << applied_step_ << " to step "
                     << h.step() << " (recovery epoch " << h.epoch() << ", asked by "
                     << proto::Role_Name(h.sender_role()) << " " << h.sender_id() << ")";
    const Status restored = RestoreTo(h.step());
    if (!restored.ok()) {
      fatal_ = restored.WithContext("rollback to step " + std::to_string(h.step()));
      return Refuse(msg.peer, &h, {RejectReason::kStaleStep, fatal_.message()});
    }
    epoch_ = h.epoch();
    restored_step_ = h.step();
    stats_.rollbacks.fetch_add(1);
    // Requests of the old epoch still waiting learn of the new one.
    for (const PendingPull& p : pending_pulls_) Refuse(p.peer, &p.request, *CheckEpoch(p.request));
    for (const PendingPull& p : pending_checkpoints_) Refuse(p.peer, &p.request, *CheckEpoch(p.request));
    pending_pulls_.clear();
    pending_checkpoints_.clear();
  } else if (h.step() != restored_step_) {
    PSF_LOG(Warning) << "shard " << options_.shard << ": ROLLBACK to step " << h.step() << " in epoch " << h.epoch()
                     << ", which began at step " << restored_step_ << "; keeping step " << restored_step_;
  }
  Reply(msg.peer, h, proto::ACK);
}

Status ParameterServer::RestoreTo(int64_t step) {
  if (step == 0) {
    Initialize();
  } else {
    if (options_.run_dir.empty()) return Status::NotFound("no run directory to load checkpoints from");
    const CheckpointIdentity id{options_.config.cluster().servers(), options_.parameter_count,
                                options_.config_digest};
    PSF_ASSIGN_OR_RETURN(ShardCheckpoint loaded, LoadShardCheckpoint(options_.run_dir, id, options_.shard, step));
    if (loaded.worker_steps.size() != worker_steps_.size()) {
      return Status::Corruption("checkpoint of step " + std::to_string(step) + " has another worker count");
    }
    worker_steps_ = loaded.worker_steps;
    optimizer_.Restore(std::move(loaded));
  }
  if (step == 0) std::fill(worker_steps_.begin(), worker_steps_.end(), 0);
  applied_step_ = step;
  applied_tokens_ = 0;  // unknown for a restored step: metrics fall back to the worker's own.
  stats_.applied_step.store(step);
  stats_.updates.store(optimizer_.updates());
  if (mode_ == proto::ClusterConfig::BSP) aggregator_.Begin(step + 1);
  return Status::Ok();
}

void ParameterServer::HandlePush(WireMessage msg) {
  const proto::Header& h = msg.header;
  const int w = static_cast<int>(h.sender_id());
  if (h.step() <= worker_steps_[w]) {
    // Exactly once: a retry or replay of a push already applied or buffered.
    stats_.duplicates.fetch_add(1);
    return Reply(msg.peer, h, proto::ACK, /*duplicate=*/true);
  }
  if (h.step() > worker_steps_[w] + 1) {
    return Refuse(msg.peer, &h, {RejectReason::kFutureStep, "push of step " + std::to_string(h.step()) +
                                                                " from worker " + std::to_string(w) +
                                                                " whose last push was step " +
                                                                std::to_string(worker_steps_[w])});
  }
  // A worker that skipped its pull would be ahead of what the mode allows.
  const bool too_early = mode_ == proto::ClusterConfig::BSP
                             ? h.step() != aggregator_.step()
                             : mode_ == proto::ClusterConfig::SSP &&
                                   SlowestWorkerStep() < h.step() - 1 - options_.config.cluster().staleness();
  if (too_early) {
    return Refuse(msg.peer, &h, {RejectReason::kFutureStep, "push of step " + std::to_string(h.step()) +
                                                                " before the parameters it needs exist (last applied step " +
                                                                std::to_string(applied_step_) + ")"});
  }
  worker_steps_[w] = h.step();
  stats_.pushes_accepted.fetch_add(1);
  Reply(msg.peer, h, proto::ACK);
  if (mode_ == proto::ClusterConfig::BSP) {
    aggregator_.Add(w, std::move(msg));
    if (aggregator_.Complete()) ApplyStep();
  } else {
    ApplyOnArrival(std::move(msg));
  }
  ServePendingPulls();
  ServePendingCheckpoints();
}

void ParameterServer::ApplyStep() {
  const int64_t step = aggregator_.step();
  if (aggregator_.total_tokens() == 0) {
    PSF_LOG(Warning) << "step " << step << " has no target tokens; its gradient is applied unnormalised";
  }
  optimizer_.Apply(step, aggregator_.sum(), aggregator_.total_tokens());  // normalises on the way
  applied_step_ = step;
  applied_loss_sum_ = aggregator_.loss_sum();
  applied_tokens_ = aggregator_.total_tokens();
  stats_.applied_step.store(step);
  stats_.updates.store(optimizer_.updates());
  aggregator_.Begin(step + 1);
  const int every = options_.config.checkpoint().every_steps();
  if (every > 0 && step % every == 0 && !options_.run_dir.empty()) {
    Status s = WriteCheckpoint(step);
    if (!s.ok()) {
      PSF_LOG(Error) << "checkpoint of step " << step << " failed: " << s.message();
    }
  }
  faults_.At(step);  // injected faults strike after a step is applied (and checkpointed)
}

void ParameterServer::ApplyOnArrival(WireMessage msg) {
  if (grad_.size() != range_.size()) grad_.resize(range_.size());
  CopyPayloadAsFloats(msg, grad_.data(), UpdateThreads(options_));
  optimizer_.Apply(msg.header.step(), grad_.data(), msg.header.target_tokens());  // normalises on the way
  applied_step_ = std::max(applied_step_, msg.header.step());
  stats_.applied_step.store(applied_step_);
  stats_.updates.store(optimizer_.updates());
}

int64_t ParameterServer::SlowestWorkerStep() const {
  return *std::min_element(worker_steps_.begin(), worker_steps_.end());
}

void ParameterServer::HandlePull(WireMessage msg) {
  const proto::Header& h = msg.header;
  if (h.sender_role() == proto::WORKER && h.step() > worker_steps_[h.sender_id()]) {
    return Refuse(msg.peer, &h, {RejectReason::kFutureStep, "pull after step " + std::to_string(h.step()) +
                                                                " from worker " + std::to_string(h.sender_id()) +
                                                                " whose last push was step " +
                                                                std::to_string(worker_steps_[h.sender_id()])});
  }
  if (mode_ == proto::ClusterConfig::BSP && h.step() < applied_step_) {
    return Refuse(msg.peer, &h, {RejectReason::kStaleStep, "pull after step " + std::to_string(h.step()) +
                                                               ", but step " + std::to_string(applied_step_) +
                                                               " is already applied"});
  }
  if (PullReady(h)) return SendParams(msg.peer, h);
  pending_pulls_.push_back({msg.peer, h});
}

bool ParameterServer::PullReady(const proto::Header& request) const {
  switch (mode_) {
    case proto::ClusterConfig::BSP: return applied_step_ >= request.step();
    case proto::ClusterConfig::SSP:
      return request.sender_role() != proto::WORKER ||
             SlowestWorkerStep() >= request.step() - options_.config.cluster().staleness();
    default: return true;
  }
}

void ParameterServer::ServePendingPulls() {
  std::vector<PendingPull> waiting;
  for (PendingPull& p : pending_pulls_) {
    if (PullReady(p.request)) {
      SendParams(p.peer, p.request);
    } else {
      waiting.push_back(std::move(p));
    }
  }
  pending_pulls_ = std::move(waiting);
}

void ParameterServer::SendParams(const std::string& peer, const proto::Header& request) {
  proto::Header h = ReplyHeader(request, proto::PARAMS);
  const bool bf16 = request.dtype() == proto::BFLOAT16;
  h.set_dtype(bf16 ? proto::BFLOAT16 : proto::FLOAT32);
  if (mode_ == proto::ClusterConfig::BSP && request.step() == applied_step_ && applied_tokens_ > 0) {
    h.set_loss_sum(applied_loss_sum_);
    h.set_target_tokens(applied_tokens_);
  }
  h.set_begin(range_.begin);
  h.set_end(range_.end);
  std::vector<Frame> payload;
  const size_t frame_bytes = static_cast<size_t>(options_.config.cluster().frame_bytes());
  // The CRC was computed once for the snapshot, not once per reply.
  const uint32_t crc = bf16 ? optimizer_.Bf16SnapshotCrc32c() : optimizer_.SnapshotCrc32c();
  if (bf16) {
    std::shared_ptr<const std::vector<uint16_t>> rounded = optimizer_.Bf16Snapshot();
    AppendViewFrames(rounded->data(), rounded->size() * sizeof(uint16_t), frame_bytes, sizeof(uint16_t), rounded,
                     &payload);
  } else {
    std::shared_ptr<const std::vector<float>> snapshot = optimizer_.Snapshot();
    AppendViewFrames(snapshot->data(), snapshot->size() * sizeof(float), frame_bytes, sizeof(float), snapshot,
                     &payload);
  }
  Status s = van_->Send(EncodeMessage(peer, h, std::move(payload), crc));
  if (!s.ok()) {
    PSF_LOG(Warning) << "cannot answer a pull: " << s.message();
  }
  stats_.pulls_answered.fetch_add(1);
  if (bf16) stats_.bf16_pulls_answered.fetch_add(1);
}

void ParameterServer::Reply(const std::string& peer, const proto::Header& request, proto::MessageType type,
                            bool duplicate) {
  proto::Header h = ReplyHeader(request, type);
  h.set_duplicate(duplicate);
  Status s = van_->Send(EncodeMessage(peer, h, {}));
  if (!s.ok()) {
    PSF_LOG(Warning) << "cannot answer " << proto::MessageType_Name(request.type()) << ": " << s.message();
  }
}

proto::Header ParameterServer::ReplyHeader(const proto::Header& request, proto::MessageType type) const {
  proto::Header h;
  h.set_type(type);
  h.set_job_id(options_.job_id);
  h.set_sender_role(proto::SERVER);
  h.set_sender_id(static_cast<uint32_t>(options_.shard));
  h.set_shard(static_cast<uint32_t>(options_.shard));
  h.set_step(request.step());
  h.set_sequence(request.sequence());
  h.set_epoch(epoch_);
  h.set_restored_step(restored_step_);
  return h;
}

void ParameterServer::Refuse(const std::string& peer, const proto::Header* request, const Rejection& why) {
  stats_.rejected.Count(why.reason);
  PSF_LOG(Warning) << "shard " << options_.shard << " refused "
                   << (request ? proto::MessageType_Name(request->type()) : std::string("a message")) << ": "
                   << why.ToString();
  proto::Header h = ReplyHeader(request ? *request : proto::Header(), proto::ERROR);
  h.set_error(why.ToString());
  h.set_reject_reason(static_cast<uint32_t>(why.reason));
  Status s = van_->Send(EncodeMessage(peer, h, {}));
  if (!s.ok()) {
    PSF_LOG(Warning) << "cannot send ERROR: " << s.message();
  }
}

void ParameterServer::HandleCheckpoint(WireMessage msg) {
  const proto::Header& h = msg.header;
  if (options_.run_dir.empty()) {
    return Refuse(msg.peer, &h, {RejectReason::kUnknownType, "this server has no run directory to checkpoint to"});
  }
  if (mode_ == proto::ClusterConfig::BSP && h.step() < applied_step_) {
    return Refuse(msg.peer, &h, {RejectReason::kStaleStep, "checkpoint of step " + std::to_string(h.step()) +
                                                               ", but step " + std::to_string(applied_step_) +
                                                               " is already applied"});
  }
  pending_checkpoints_.push_back({msg.peer, h});
  ServePendingCheckpoints();
}

void ParameterServer::ServePendingCheckpoints() {
  std::vector<PendingPull> waiting;
  for (PendingPull& p : pending_checkpoints_) {
    if (mode_ == proto::ClusterConfig::BSP && applied_step_ < p.request.step()) {
      waiting.push_back(std::move(p));
      continue;
    }
    Status s = WriteCheckpoint(p.request.step());
    if (s.ok()) {
      Reply(p.peer, p.request, proto::ACK);
    } else {
      proto::Header h = ReplyHeader(p.request, proto::ERROR);
      h.set_error("checkpoint failed: " + s.message());
      van_->Send(EncodeMessage(p.peer, h, {})).ok();
    }
  }
  pending_checkpoints_ = std::move(waiting);
}

Status ParameterServer::WriteCheckpoint(int64_t step) {
  const CheckpointIdentity id{options_.config.cluster().servers(), options_.parameter_count, options_.config_digest};
  ShardCheckpointView view;
  view.shard = options_.shard;
  view.shards = id.shards;
  view.step = step;
  view.updates = optimizer_.updates();
  view.begin = range_.begin;
  view.end = range_.end;
  view.worker_steps = worker_steps_;
  if (mode_ == proto::ClusterConfig::BSP) {
    // The cut is "after step": pushes of step+1 already buffered are not in it, and a resumed
    // server expects them again.
    std::fill(view.worker_steps.begin(), view.worker_steps.end(), step);
  }
  view.params = optimizer_.params();
  view.m = optimizer_.m();
  view.v = optimizer_.v();
  view.midway = [this, step] { faults_.DuringCheckpoint(step); };
  PSF_RETURN_IF_ERROR(SaveShardCheckpoint(options_.run_dir, id, view, options_.config.checkpoint().keep_last()));
  stats_.checkpoints_written.fetch_add(1);
  PSF_LOG(Info) << "shard " << options_.shard << " wrote its checkpoint of step " << step;
  return Status::Ok();
}

Status ParameterServer::CheckpointLastStep() {
  if (options_.run_dir.empty() || mode_ != proto::ClusterConfig::BSP || applied_step_ == 0) return Status::Ok();
  const CheckpointIdentity id{options_.config.cluster().servers(), options_.parameter_count, options_.config_digest};
  if (VerifyCheckpoint(options_.run_dir, applied_step_, id).ok()) return Status::Ok();
  return WriteCheckpoint(applied_step_);
}

}  // namespace psformer
