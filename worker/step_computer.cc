#include "worker/step_computer.h"

#include <string>
#include <utility>

#include "common/logging.h"
#include "worker/data/batch_source.h"
#include "worker/emulated_step.h"
#include "worker/transformer_step.h"
#include "worker/worker_backend.h"

namespace psformer {

namespace {

Status CheckMovedMemory(const std::shared_ptr<void>& memory, const char* what) {
  if (!memory) return Status::InvalidArgument(std::string("step computer: no memory to move the ") + what + " to");
  if (reinterpret_cast<uintptr_t>(memory.get()) % alignof(float) != 0) {
    return Status::InvalidArgument(std::string("step computer: the memory for the ") + what +
                                   " is not aligned for its elements");
  }
  return Status::Ok();
}

}  // namespace

Status StepComputer::MoveGradientTo(std::shared_ptr<void> memory) {
  PSF_RETURN_IF_ERROR(CheckMovedMemory(memory, "gradient"));
  // The old array is freed only once the copies are aimed at the new one: a GPU's registration
  // of it is undone first, while it is still mapped.
  const std::shared_ptr<void> old =
      grad_bf16_.empty() ? grad_.Adopt(std::move(memory)) : grad_bf16_.Adopt(std::move(memory));
  return GradientMoved();
}

Status StepComputer::MoveLookupsTo(std::shared_ptr<void> memory) {
  PSF_RETURN_IF_ERROR(CheckMovedMemory(memory, "lookups' values"));
  const std::shared_ptr<void> old = lookup_values_bf16_.empty() ? lookup_values_.Adopt(std::move(memory))
                                                                : lookup_values_bf16_.Adopt(std::move(memory));
  return LookupsMoved();
}

StatusOr<std::unique_ptr<StepComputer>> MakeStepComputer(const proto::JobConfig& config, int worker, int gpu,
                                                         bool with_bleu) {
  if (config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    PSF_LOG(Info) << "emulated GPU: " << config.cluster().emulated_step_ms()
                  << " ms a step, no arithmetic; gradients are pseudo-random, loss and tokens synthetic";
    return std::unique_ptr<StepComputer>(std::make_unique<EmulatedStep>(config, worker));
  }
  PSF_ASSIGN_OR_RETURN(auto backend, MakeWorkerBackend(config, gpu));
  PSF_ASSIGN_OR_RETURN(auto source, MakeBatchSource(config));
  PSF_ASSIGN_OR_RETURN(auto step,
                       TransformerStep::Create(config, worker, std::move(source), std::move(backend), with_bleu));
  return std::unique_ptr<StepComputer>(std::move(step));
}

}  // namespace psformer
