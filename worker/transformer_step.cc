#include "worker/transformer_step.h"

#include <utility>

#include "common/logging.h"
#include "pserver/wire/piece_table.h"

namespace psformer {

TransformerStep::TransformerStep(const proto::JobConfig& config, int worker, std::unique_ptr<BatchSource> source,
                                 std::unique_ptr<Backend<float>> backend)
    : StepComputer(ParamLayout(config.model(), source->vocab_size()).total_size()),
      config_(config),
      worker_(worker),
      source_(std::move(source)),
      backend_(std::move(backend)),
      model_(std::make_unique<Transformer<float>>(config_.model(), source_->vocab_size(), backend_.get())),
      split_embedding_(config.cluster().split_embedding()),
      copy_chunk_(JobPieceElements(config)) {
  PSF_CHECK(model_->parameter_count() == parameter_count());
  model_->set_output_projection_blocks(config.cluster().output_projection_blocks());
}

StatusOr<std::unique_ptr<TransformerStep>> TransformerStep::Create(const proto::JobConfig& config, int worker,
                                                                   std::unique_ptr<BatchSource> source,
                                                                   std::unique_ptr<Backend<float>> backend,
                                                                   bool with_bleu) {
  std::unique_ptr<TransformerStep> s(new TransformerStep(config, worker, std::move(source), std::move(backend)));
  const uint64_t n = s->parameter_count();
  s->device_params_ = s->backend_->Allocate<float>(n);
  s->device_grad_ = s->backend_->Allocate<float>(n);
  // Each step's upload of every parameter reads params_: pinned, it is one DMA at the bus's speed.
  s->params_pinned_ = s->backend_->PinHostMemory(s->params_.data(), n * sizeof(float));
  if (config.cluster().gradient_dtype() == proto::ClusterConfig::BF16 && s->backend_->rounds_on_device()) {
    // Rounded where it was computed: half the bytes cross the bus, and no host thread rounds.
    s->GradientLeavesAsBf16();
    s->device_grad_bf16_ = s->backend_->Allocate<uint16_t>(n);
  }
  PSF_RETURN_IF_ERROR(s->AimGradientCopies());
  if (config.cluster().param_dtype() == proto::ClusterConfig::BF16 && s->backend_->rounds_on_device()) {
    // bf16 pulls are uploaded as they came and widened on the device.
    s->ParamsArriveAsBf16();
    s->device_params_bf16_ = s->backend_->Allocate<uint16_t>(n);
    s->params_bf16_pinned_ = s->backend_->PinHostMemory(s->params_bf16_.data(), n * sizeof(uint16_t));
  }
  PSF_ASSIGN_OR_RETURN(s->param_upload_,
                       s->backend_->MakeRangeUploader(s->params_.data(), s->device_params_.data(), n, sizeof(float)));
  if (!s->params_bf16_.empty()) {
    PSF_ASSIGN_OR_RETURN(s->bf16_upload_, s->backend_->MakeRangeUploader(s->params_bf16_.data(),
                                                                         s->device_params_bf16_.data(), n,
                                                                         sizeof(uint16_t)));
  }
  // Each layer uploaded in parts of at most a piece: a large one (the embedding, 19M values in the
  // base model) starts crossing the bus with its first piece in, not its last.
  for (const auto& [begin, end] : s->model_->forward_ranges()) {
    for (const ElementRange& chunk : InChunks({begin, end}, s->copy_chunk_)) s->forward_ranges_.push_back(chunk);
  }
  if (s->split_embedding_) {  // room for every row the lookups can name (the model's own buffer's)
    const size_t room = static_cast<size_t>(s->source_->vocab_size()) * config.model().d_model();
    s->MakeLookupArray(room);  // rounded on the device, as the rest of the gradient, or not
    if (!s->lookup_values_bf16_.empty()) s->device_lookups_bf16_ = s->backend_->Allocate<uint16_t>(room);
  }
  if (with_bleu) {
    PSF_ASSIGN_OR_RETURN(s->valid_bleu_, ValidBleu::Create(config, s->source_->vocab_size(), s->source_->ValidBatches(),
                                                           s->backend_.get()));
  }
  return s;
}

Status TransformerStep::AimGradientCopies() {
  const uint64_t n = parameter_count();
  grad_crcs_ = nullptr;
  grad_download_.reset();  // lets go of (unpins) the array it was aimed at first
  if (!grad_bf16_.empty()) {
    PSF_ASSIGN_OR_RETURN(grad_download_,
                         backend_->MakeBf16RangeDownloader(device_grad_bf16_.data(), grad_bf16_.data(), n));
  } else {
    PSF_ASSIGN_OR_RETURN(grad_download_, backend_->MakeRangeDownloader(device_grad_.data(), grad_.data(), n));
  }
  // The copies record each block's CRC-32C where they read it, so that no host pass checksums the push.
  grad_crcs_ = grad_download_->RecordBlockCrcs();
  return Status::Ok();
}

StepStats TransformerStep::Compute(int64_t step, const GradientCopying& on_copying) {
  const uint64_t n = parameter_count();
  const Batch batch = source_->TrainBatch(step, worker_, config_.cluster().workers());
  backend_->MarkSpanStart();
  const ParamsNeeded need = StartParamUploads();
  // A share with no sentence (a batch smaller than the worker count) runs no forward, so nothing
  // would ask for the layers: they are taken in here, as forward would, and the pull's pieces go
  // back once uploaded, as after any forward. Its gradient is zeros.
  if (batch.sentences == 0 || batch.src_len == 0 || batch.tgt_len == 0) need(0, n);
  const DropoutKey key{config_.training().seed(), static_cast<uint32_t>(step), static_cast<uint32_t>(worker_)};
  const bool bf16 = !grad_bf16_.empty();
  LookupRows<float>* lookups = split_embedding_ ? &device_lookups_ : nullptr;
  if (!on_copying) {
    const StepStats stats =
        model_->ForwardBackward(device_params_.data(), batch, key, device_grad_.data(), nullptr, need, lookups);
    CheckEveryLayerUploaded();
    NameLookedUpRows();
    AwaitGradientMemory();
    StaleGradientCrcs();
    StartLookupsCopy();
    if (bf16) backend_->RoundToBf16(n, device_grad_.data(), device_grad_bf16_.data());
    backend_->MarkSpanEnd();
    // The whole gradient through the same copies as overlap's ranges, so that they record its
    // blocks' CRCs and the push reads none of it again; waited for here, as the data path asks.
    const std::vector<ElementRange> chunks = InChunks({0, n}, copy_chunk_);
    for (const ElementRange& chunk : chunks) grad_download_->Start(chunk.begin, chunk.end);
    for (size_t i = 0; i < chunks.size(); ++i) grad_download_->WaitOldest();
    return stats;
  }
  // Per layer: (a rounding kernel,) a copy enqueued on the copy stream and a queue push; nothing
  // waits here.
  bool named = false;
  const GradientReady ready = [&](uint64_t begin, uint64_t end, const StepStats& s) {
    if (!named) {  // before the first range is handed over: the client thread reads them after
      NameLookedUpRows();
      AwaitGradientMemory();
      StaleGradientCrcs();
      named = true;
    }
    if (bf16) backend_->RoundToBf16(end - begin, device_grad_.data() + begin, device_grad_bf16_.data() + begin);
    // A range of more than a piece leaves in parts of at most one: the data path sends the first
    // while the rest still crosses the bus (the embedding's, final last, is 30% of the base model).
    for (const ElementRange& chunk : InChunks({begin, end}, copy_chunk_)) {
      grad_download_->Start(chunk.begin, chunk.end);
      on_copying(chunk.begin, chunk.end, s);
    }
  };
  const StepStats stats =
      model_->ForwardBackward(device_params_.data(), batch, key, device_grad_.data(), ready, need, lookups);
  CheckEveryLayerUploaded();
  backend_->MarkSpanEnd();
  if (!named) AwaitGradientMemory();  // no range handed over: the lookups' copy still writes
  StartLookupsCopy();
  return stats;
}

void TransformerStep::StaleGradientCrcs() {
  // Each step's copies record the CRCs of the blocks they write whole, and which blocks those are
  // depends on how the step's ranges fall (layer by layer, or the whole gradient at a step that
  // injects a fault): a block a step wrote but did not record must not keep an older step's CRC.
  // The copies read the stamp where they start; the last push has been read by now.
  if (grad_crcs_ != nullptr) grad_crcs_->Invalidate();
}

void TransformerStep::NameLookedUpRows() {
  if (!split_embedding_) return;
  named_rows_ = Lookups{device_lookups_.rows, nullptr, static_cast<uint64_t>(config_.model().d_model())};
}

void TransformerStep::StartLookupsCopy() {
  if (!split_embedding_) return;
  const uint64_t width = static_cast<uint64_t>(config_.model().d_model());
  const uint64_t count = device_lookups_.rows.size() * width;
  AwaitLookups();  // a step whose lookups were never pushed (it ended the run): its copy first
  const bool bf16 = !lookup_values_bf16_.empty();
  lookups_ = Lookups{device_lookups_.rows, bf16 ? nullptr : lookup_values_.data(), width,
                     bf16 ? lookup_values_bf16_.data() : nullptr};
  if (count == 0) return;
  // Rounded where they were computed, as the rest of the gradient: half the bytes cross the bus.
  if (bf16) backend_->RoundToBf16(count, device_lookups_.values, device_lookups_bf16_.data());
  const void* device = bf16 ? static_cast<const void*>(device_lookups_bf16_.data()) : device_lookups_.values;
  void* host = bf16 ? static_cast<void*>(lookup_values_bf16_.data()) : lookup_values_.data();
  if (device != lookups_aimed_at_) {  // the model's buffer, made in the first step
    lookup_download_.reset();         // lets go of (unpins) the host array first
    lookups_aimed_at_ = nullptr;
    auto made =
        bf16 ? backend_->MakeBf16RangeDownloader(device_lookups_bf16_.data(), lookup_values_bf16_.data(),
                                                 lookup_values_bf16_.size())
             : backend_->MakeRangeDownloader(device_lookups_.values, lookup_values_.data(), lookup_values_.size());
    if (!made.ok()) {  // copied here, then: slower, still right
      PSF_LOG(Warning) << "the lookups' copy off the device runs on the launching thread: " << made.status().ToString();
      backend_->CopyToHost(host, device, count * (bf16 ? sizeof(uint16_t) : sizeof(float)));
      return;
    }
    lookup_download_ = std::move(*made);
    lookups_aimed_at_ = device;
  }
  // Queued behind backward on the device; the data path's thread waits for it (AwaitLookups).
  lookup_download_->Start(0, count);
  lookups_copying_ = true;
}

Status TransformerStep::LookupsMoved() {
  AwaitLookups();
  lookup_download_.reset();  // aimed again, at the new array, by the next step's copy
  lookups_aimed_at_ = nullptr;
  return Status::Ok();
}

void TransformerStep::AwaitLookups() {
  if (!lookups_copying_) return;
  lookup_download_->WaitOldest();
  lookups_copying_ = false;
}

ParamsNeeded TransformerStep::StartParamUploads() {
  // Every layer's copy is enqueued now, in forward order, on the uploader's stream; forward waits
  // (on the device) for a layer's only where it first reads it. The host arrays are read by those
  // copies until forward has run: the early pull that writes them again is sent only once the
  // first gradient range is on the host (its copy follows forward on the device), and a later
  // pull after Compute's copies have landed.
  const bool bf16 = pulled_bf16();
  RangeUploader* uploader = ParamUploader();
  if (arrival_ == nullptr) {
    uploader->Start(forward_ranges_);
    return [this, uploader, bf16](uint64_t begin, uint64_t end) {
      uploader->Await(begin, end);
      if (bf16) backend_->WidenBf16(end - begin, device_params_bf16_.data() + begin, device_params_.data() + begin);
    };
  }
  // The pull still landing (cluster.forward_as_pulled): a layer's copy is enqueued where forward
  // first reads it, chunk by chunk, each once the pull's pieces holding it are in, so the
  // launching thread waits for that layer's pieces only, while the device runs the layers before
  // and the layer's first chunks cross the bus.
  uploader->Start({});
  uploads_started_.assign(forward_ranges_.size(), false);
  return [this, uploader, bf16](uint64_t begin, uint64_t end) {
    for (size_t i = 0; i < forward_ranges_.size(); ++i) {
      const ElementRange& r = forward_ranges_[i];
      if (uploads_started_[i] || r.end <= begin || end <= r.begin) continue;
      // A failed pull ends the wait: forward reads whatever is there, and the data path pushes
      // nothing of this step (it learns of the failure from the pull itself).
      const Status landed = arrival_->Await(r.begin, r.end);
      (void)landed;
      UploadLanded(uploader, r, bf16);
      uploads_started_[i] = true;
    }
    uploader->Await(begin, end);
    if (bf16) backend_->WidenBf16(end - begin, device_params_bf16_.data() + begin, device_params_.data() + begin);
  };
}

void TransformerStep::UploadLanded(RangeUploader* uploader, ElementRange r, bool bf16) {
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  uint64_t at = r.begin;  // what is before `at` is started, or pending
  // Frames that lie end to end (a server's snapshot, lent frame by frame) go as one copy.
  ElementRange pending{r.begin, r.begin};
  const uint8_t* pending_bytes = nullptr;
  const auto flush = [&] {
    if (pending.end > pending.begin) uploader->AddFrom(pending, pending_bytes);
    pending = {at, at};
  };
  for (std::shared_ptr<const LentParams>& lent : arrival_->LentIn(r.begin, r.end)) {
    PSF_CHECK(lent->element_bytes == elem);
    lent->ForEachSpan(r.begin, r.end, [&](uint64_t first, const uint8_t* bytes, uint64_t count) {
      const bool follows = pending.end > pending.begin && pending.end == first &&
                           pending_bytes + (pending.end - pending.begin) * elem == bytes;
      if (!follows) {
        flush();
        if (at < first) uploader->Add({at, first});  // a piece landed in the host array
        pending = {first, first};
        pending_bytes = bytes;
      }
      pending.end = first + count;
      at = pending.end;
    });
    lent_uploading_.push_back(std::move(lent));
  }
  flush();
  if (at < r.end) uploader->Add({at, r.end});
}

void TransformerStep::CheckEveryLayerUploaded() {
  if (arrival_ == nullptr) return;
  for (const bool started : uploads_started_) PSF_CHECK(started);  // forward read every layer
  if (lent_uploading_.empty()) return;
  // Forward has read them on the device already (its loss has been read), so this waits for
  // nothing on a GPU; then the servers may have their snapshot's memory back.
  ParamUploader()->Quiesce();
  lent_uploading_.clear();
}

void TransformerStep::UploadParams() {
  const uint64_t n = parameter_count();
  if (pulled_bf16()) {
    device_params_bf16_.Upload(params_bf16_.data(), n);
    backend_->WidenBf16(n, device_params_bf16_.data(), device_params_.data());
  } else {
    device_params_.Upload(params_.data(), n);
  }
}

StatusOr<ValidationResult> TransformerStep::Validate(std::vector<std::string>* hypotheses) {
  UploadParams();
  return ValidateWithBleu(model_.get(), device_params_.data(), source_->ValidBatches(), valid_bleu_.get(), hypotheses);
}

}  // namespace psformer
