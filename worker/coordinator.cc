#include "worker/coordinator.h"

#include <utility>

#include "common/config_loader.h"
#include "common/logging.h"
#include "common/transport/faulty_van.h"
#include "common/transport/van_factory.h"

namespace psformer {

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const proto::JobConfig& config, const std::string& run_dir,
                                                         PsClientOptions control) {
  TrainingReporter::Options report;
  report.run_dir = run_dir;
  report.tensorboard = config.logging().tensorboard();
  PSF_ASSIGN_OR_RETURN(auto reporter, TrainingReporter::Open(config, report));
  return std::unique_ptr<Coordinator>(new Coordinator(config, std::move(control), std::move(reporter)));
}

Status Coordinator::Started(int64_t first_step, int64_t last_pushed, uint32_t incarnation) {
  reporter_->Start(first_step);
  if (incarnation == 0) return Status::Ok();
  return Written(reporter_->Note(last_pushed, "worker-0 restarted (incarnation " + std::to_string(incarnation) +
                                                  "), rejoining at step " + std::to_string(first_step)));
}

Status Coordinator::RolledBack(int64_t restored, const std::string& why) {
  return Written(reporter_->Note(
      restored, "rolled back to the checkpoint of step " + std::to_string(restored) + " (" + why + ")"));
}

Status Coordinator::Pulled(int64_t step, const PsClient& client, TrainInterval* interval, bool last) {
  if (step < 1) return Status::Ok();
  global_loss_sum_ += client.last_pull_loss_sum();
  global_tokens_ += static_cast<int64_t>(client.last_pull_tokens());
  if (step % config_.logging().every_steps() != 0 && !last) return Status::Ok();
  return Log(step, interval);
}

Status Coordinator::Stopped(int64_t pulled, TrainInterval* interval) {
  return pulled < 1 ? Status::Ok() : Log(pulled, interval);
}

Status Coordinator::Log(int64_t step, TrainInterval* interval) {
  // Not a step logged before a rollback, nor an interval without a step of this process (the
  // pull a resumed or restarted worker starts with, of the checkpoint's step: a line of it would
  // say loss 0 over 0 tokens).
  if (step <= logged_through_ || interval->steps == 0) return Status::Ok();
  logged_through_ = step;
  // The loss over every worker's batches where the servers said it (BSP), else this worker's.
  TrainInterval line = *interval;
  line.has_step_times = true;
  if (global_tokens_ > 0) {
    line.loss_sum = global_loss_sum_;
    line.tokens = global_tokens_;
  }
  const Status logged = Written(reporter_->Train(step, line));
  *interval = interval->Next();
  global_loss_sum_ = 0;
  global_tokens_ = 0;
  return logged;
}

Status Coordinator::MakeControlClient(const PsClient& client) {
  if (!control_) {
    PSF_ASSIGN_OR_RETURN(auto van, MakeClientVan(config_, FaultStream(FaultRole::kControl, 0)));
    PSF_ASSIGN_OR_RETURN(control_, PsClient::Create(control_options_, std::move(van)));
  }
  control_->SetEpoch(client.epoch(), client.epoch_start());
  return Status::Ok();
}

void Coordinator::MaybeCheckpoint(int64_t step, const PsClient& client) {
  const float minutes = config_.checkpoint().every_minutes();
  if (minutes <= 0 || step < 1 ||
      std::chrono::duration<double>(Clock::now() - last_checkpoint_).count() < minutes * 60) {
    return;
  }
  last_checkpoint_ = Clock::now();
  AskForCheckpoint(step, client, "time-based checkpoint");
}

void Coordinator::CheckpointTheEnd(int64_t last_step, const PsClient& client) {
  if (WritesCheckpoints(config_) && last_step >= 1) AskForCheckpoint(last_step, client, "the last step's checkpoint");
}

void Coordinator::AskForCheckpoint(int64_t step, const PsClient& client, const char* which) {
  Status s = MakeControlClient(client);
  if (s.ok()) s = control_->Checkpoint(step);
  if (!s.ok()) PSF_LOG(Warning) << which << ", of step " << step << ", failed: " << s.message();
}

Status Coordinator::ShutDownJob(const PsClient& client, int64_t last_step) {
  PSF_RETURN_IF_ERROR(MakeControlClient(client));
  return control_->Shutdown(last_step);
}

}  // namespace psformer
