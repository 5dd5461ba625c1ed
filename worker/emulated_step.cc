#include "worker/emulated_step.h"

#include <utility>

#include "common/config_loader.h"

namespace psformer {

EmulatedStep::EmulatedStep(const proto::JobConfig& config, int worker)
    : EmulatedStep(config, worker, std::make_unique<EmulatedGpu>(config, worker)) {}

EmulatedStep::EmulatedStep(const proto::JobConfig& config, int /*worker*/, std::unique_ptr<EmulatedGpu> gpu)
    : StepComputer(gpu->parameter_count()), gpu_(std::move(gpu)), vocab_(ResolvedVocabSize(config)) {
  // A GPU rounds its bf16 gradient on the device; so does the emulated one.
  if (config.cluster().gradient_dtype() == proto::ClusterConfig::BF16) GradientLeavesAsBf16();
  // And takes bf16 parameters as they came, widening them there.
  if (config.cluster().param_dtype() == proto::ClusterConfig::BF16) ParamsArriveAsBf16();
  // The lookups' values leave the device as the rest of the gradient does, rounded or not.
  if (!gpu_->lookup_values().empty()) MakeLookupArray(gpu_->lookup_values().size());
  RecordGradientCrcs();
}

void EmulatedStep::RecordGradientCrcs() {
  // Its copies record the blocks' CRCs where they write them, as a GPU's do, so that the push's
  // checksum reads no byte of the gradient again.
  grad_crcs_ = gpu_->RecordBlockCrcs(grad_bf16_.empty() ? static_cast<const void*>(grad_.data()) : grad_bf16_.data(),
                                     leaving_gradient_bytes());
}

StepStats EmulatedStep::Compute(int64_t step, const GradientCopying& on_copying) {
  // The emulated GPU launches each range's download itself, as it launches backward.
  gpu_->set_upload_bf16(pulled_bf16());
  if (!gpu_->lookup_rows().empty()) {
    named_rows_ = Lookups{gpu_->lookup_rows(), nullptr,
                          static_cast<uint64_t>(gpu_->lookup_values().size() / gpu_->lookup_rows().size())};
  }
  // With the pull still landing, forward takes each layer as it lands, and the gradients' key
  // (the pull's digest) once all of it has.
  EmulatedGpu::Arriving arriving;
  if (arrival_ != nullptr) {
    arriving.await = [this](uint64_t begin, uint64_t end) {
      const Status landed = arrival_->Await(begin, end);  // a failed pull: nothing of the step is pushed
      (void)landed;
    };
    arriving.digest = [this] { return arrival_->AwaitAll().digest; };
  }
  const StepStats stats =
      gpu_->Step(step, params_digest_, grad_.data(), grad_bf16_.empty() ? nullptr : grad_bf16_.data(), on_copying,
                 arrival_ != nullptr ? &arriving : nullptr, [this] { AwaitGradientMemory(); });
  if (!gpu_->lookup_rows().empty()) {
    // The lookups' part is copied off the device after backward, as a GPU worker's is, and
    // awaited by the data path (AwaitLookups).
    gpu_->CopyLookups(lookup_values_.data(), lookup_values_bf16_.data());
    lookups_ = Lookups{gpu_->lookup_rows(), lookup_values_.data(),
                       static_cast<uint64_t>(gpu_->lookup_values().size() / gpu_->lookup_rows().size()),
                       lookup_values_bf16_.data()};
  }
  return stats;
}

void EmulatedStep::AwaitLookups() { gpu_->AwaitLookups(); }

StatusOr<ValidationResult> EmulatedStep::Validate(std::vector<std::string>* /*hypotheses*/) {
  return Status::Unimplemented("an emulated GPU has no model to validate");
}

}  // namespace psformer
