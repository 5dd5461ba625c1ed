// TransformerStep: the StepComputer of a real worker, the paper's Transformer on a backend (CPU:
// OpenBLAS; CUDA) over this worker's share of each step's batch, a pure function of (seed, step,
// worker) (data/batch_source.h).
//
// On a backend whose memory is not the host's, each layer's gradient leaves the device as backward
// reports it final, on the backend's RangeDownloader (backend/range_downloader.h), and is handed
// on (GradientCopying) as soon as its copy has started: the worker's data path waits for the copy
// on a thread of its own (worker/datapath/). The host copies of the parameters and the gradient
// are pinned where the backend can (Backend::PinHostMemory), so both directions are DMA.
#ifndef PSFORMER_WORKER_TRANSFORMER_STEP_H_
#define PSFORMER_WORKER_TRANSFORMER_STEP_H_

#include <memory>
#include <string>
#include <vector>

#include "worker/backend/backend.h"
#include "worker/backend/range_downloader.h"
#include "worker/data/batch_source.h"
#include "worker/model/transformer.h"
#include "worker/step_computer.h"
#include "worker/valid_bleu.h"

namespace psformer {

class TransformerStep final : public StepComputer {
 public:
  // `with_bleu`: validation BLEU is computed too (needs the corpus's spm.model).
  static StatusOr<std::unique_ptr<TransformerStep>> Create(const proto::JobConfig& config, int worker,
                                                           std::unique_ptr<BatchSource> source,
                                                           std::unique_ptr<Backend<float>> backend, bool with_bleu);

  int vocab_size() const override { return source_->vocab_size(); }
  bool computes_as_pulled() const override { return true; }
  bool reads_lent_params() const override { return true; }
  // A device that copies by DMA only from registered memory: the peers' shared memory is
  // registered with it (Backend::PinHostMemory) as the client maps it.
  std::function<std::shared_ptr<void>(void* host, size_t bytes)> peer_memory_pinner() override {
    if (backend_->uploads_from_any_host_memory()) return nullptr;
    return [backend = backend_.get()](void* host, size_t bytes) { return backend->PinHostMemory(host, bytes); };
  }
  StepStats Compute(int64_t step, const GradientCopying& on_copying) override;
  RangeDownloader& gradient_copies() override { return *grad_download_; }
  const BlockCrcs* gradient_crcs() const override { return grad_crcs_; }
  void AwaitLookups() override;
  double last_device_s() override { return backend_->SpanSeconds(); }
  // Not on a corpus without valid.bin: validating no batch would report zeros as if measured.
  bool validates() const override { return !source_->ValidBatches().empty(); }
  StatusOr<ValidationResult> Validate(std::vector<std::string>* hypotheses) override;
  const std::vector<std::string>* bleu_references() const override {
    return valid_bleu_ ? &valid_bleu_->references() : nullptr;
  }

 private:
  // The last pull's parameters into device_params_: as fp32, or as bf16 widened on the device.
  void UploadParams();
  // The same by layers for a training step: every layer's upload started now, in forward order;
  // the returned hook makes the device wait for a layer's (and widens it, bf16) where forward
  // first reads it.
  // With the pull still landing (arrival_), a layer's upload is started in the hook, once its
  // pieces are in.
  ParamsNeeded StartParamUploads();
  // The uploader of the last pull's parameters: of bf16 ones as they came, or of fp32.
  RangeUploader* ParamUploader() const { return pulled_bf16() ? bf16_upload_.get() : param_upload_.get(); }
  // With arrival_: the upload of chunk r of a layer, whose pieces have landed: from where the
  // lent ones lie (PullArrival::LentIn), the rest from the host array.
  void UploadLanded(RangeUploader* uploader, ElementRange r, bool bf16);
  // With arrival_: every layer's upload was started (forward read every layer). Checked. Then
  // the lent pieces uploaded are let go of once their copies have read them.
  void CheckEveryLayerUploaded();
  // (Re)makes grad_download_, aimed at grad_bf16_ when the gradient leaves rounded, else grad_.
  Status AimGradientCopies();
  Status GradientMoved() override { return AimGradientCopies(); }
  Status LookupsMoved() override;
  // With split_embedding_: starts the copy of this step's lookups' part from the device into
  // lookups_ (awaited by AwaitLookups, on the data path's thread).
  void StartLookupsCopy();
  // With split_embedding_: the rows this step's ForwardBackward looks up into named_rows_.
  void StaleGradientCrcs();  // before a step's first gradient copy
  void NameLookedUpRows();

  TransformerStep(const proto::JobConfig& config, int worker, std::unique_ptr<BatchSource> source,
                  std::unique_ptr<Backend<float>> backend);

  const proto::JobConfig& config_;
  int worker_;
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<Backend<float>> backend_;
  std::unique_ptr<Transformer<float>> model_;
  DeviceBuffer<float> device_params_, device_grad_;  // backend, (n)
  DeviceBuffer<uint16_t> device_grad_bf16_;          // backend, (n) when the gradient leaves as bf16
  DeviceBuffer<uint16_t> device_params_bf16_;        // backend, (n) when bf16 pulls arrive as they came
  std::shared_ptr<void> params_pinned_;              // params_ pinned while this lives (or null)
  std::shared_ptr<void> params_bf16_pinned_;         // params_bf16_ likewise
  std::unique_ptr<RangeDownloader> grad_download_;   // device_grad_ to grad_ (or its bf16 to grad_bf16_) as
                                                     // backward reports layers
  BlockCrcs* grad_crcs_ = nullptr;                   // grad_download_'s record of the blocks' CRCs, or null
  // Lent pieces (pull_landing.h) this step's uploads read, kept until their copies have: declared
  // before the uploaders, so that an uploader's destructor, which waits for its copies, runs
  // while the servers' memory they read is still mapped and registered.
  std::vector<std::shared_ptr<const LentParams>> lent_uploading_;
  std::unique_ptr<RangeUploader> param_upload_;      // params_ to device_params_, by layers
  std::unique_ptr<RangeUploader> bf16_upload_;       // params_bf16_ to device_params_bf16_ (or null)
  std::vector<ElementRange> forward_ranges_;         // the model's layers in forward order, in chunks
  std::vector<bool> uploads_started_;                // (forward_ranges_) this step's, as the pull lands
  bool split_embedding_ = false;                     // cluster.split_embedding: lookups kept apart
  uint64_t copy_chunk_ = 0;                          // the most elements of one copy: a piece's
  LookupRows<float> device_lookups_;                 // the model's, on the device
  DeviceBuffer<uint16_t> device_lookups_bf16_;       // their values rounded, when the gradient leaves so
  std::unique_ptr<RangeDownloader> lookup_download_;  // the values (or their rounding) to lookup_values_(bf16_)
  const void* lookups_aimed_at_ = nullptr;            // the device array lookup_download_ reads
  bool lookups_copying_ = false;                      // a copy started and not yet awaited
  std::unique_ptr<ValidBleu> valid_bleu_;            // with validation BLEU only
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSFORMER_STEP_H_
