// EmulatedStep: the StepComputer of cluster.backend EMULATED, an EmulatedGpu (emulated_gpu.h)
// behind the worker's step interface: its copy engine is the computer's gradient_copies(). No
// data, no model, nothing to validate.
#ifndef PSFORMER_WORKER_EMULATED_STEP_H_
#define PSFORMER_WORKER_EMULATED_STEP_H_

#include <string>
#include <vector>

#include "worker/emulated_gpu.h"
#include "worker/step_computer.h"

namespace psformer {

class EmulatedStep final : public StepComputer {
 public:
  // REQUIRES: as EmulatedGpu's.
  EmulatedStep(const proto::JobConfig& config, int worker);

  int vocab_size() const override { return vocab_; }
  bool computes_as_pulled() const override { return true; }
  // Its uploads read no bytes (only their time is emulated): pieces may stay where they came.
  bool reads_lent_params() const override { return true; }
  StepStats Compute(int64_t step, const GradientCopying& on_copying) override;
  RangeDownloader& gradient_copies() override { return gpu_->copies(); }
  // The emulated copy engine's record of the leaving gradient's blocks (EmulatedGpu::RecordBlockCrcs).
  const BlockCrcs* gradient_crcs() const override { return grad_crcs_; }
  // Waits until the last step's lookups are off the emulated device (EmulatedGpu::AwaitLookups).
  void AwaitLookups() override;
  double last_device_s() override { return gpu_->step_seconds(); }
  void ParamsPulled(uint32_t digest, proto::DType dtype) override {
    StepComputer::ParamsPulled(digest, dtype);
    params_digest_ = digest;
  }
  bool validates() const override { return false; }
  StatusOr<ValidationResult> Validate(std::vector<std::string>* hypotheses) override;
  const std::vector<std::string>* bleu_references() const override { return nullptr; }

 private:
  EmulatedStep(const proto::JobConfig& config, int worker, std::unique_ptr<EmulatedGpu> gpu);
  // Aims the copy engine's record of the blocks' CRCs at the array the gradient leaves into.
  void RecordGradientCrcs();
  Status GradientMoved() override {
    RecordGradientCrcs();
    return Status::Ok();
  }

  std::unique_ptr<EmulatedGpu> gpu_;
  int vocab_;
  const BlockCrcs* grad_crcs_ = nullptr;  // gpu_'s, of the leaving array
  uint32_t params_digest_ = 0;  // of the last pull: what the next step's gradients are keyed by
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_EMULATED_STEP_H_
