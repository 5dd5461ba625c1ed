#include "worker/train/loss_check.h"

#include <cmath>
#include <string>

#include "common/supervisor_report.h"

namespace psformer {

Status CheckLossIsFinite(int64_t step, double loss_sum) {
  if (std::isfinite(loss_sum)) return Status::Ok();
  const std::string why = "the loss is not finite at step " + std::to_string(step) + " (" + std::to_string(loss_sum) +
                          "): training diverged; not restarted, since a restart computes from the same weights. "
                          "Lower the learning rate (schedule.scale, optimizer.warmup_steps) or check the data, then "
                          "start over with --overwrite, or --resume from a checkpoint before the divergence";
  ReportToSupervisor(kReportFatal, why);
  // Corruption, not Aborted: a worker reads Aborted as a rollback to recompute from.
  return Status::Corruption(why);
}

}  // namespace psformer
