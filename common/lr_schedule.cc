#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace psformer {

double LearningRate(const proto::JobConfig& config, int64_t step) {
  const auto& schedule = config.schedule();
  if (schedule.kind() == proto::ScheduleConfig::CONSTANT) return schedule.constant_lr();
  const double s = static_cast<double>(step);
  const double warmup = config.optimizer().warmup_steps();
  return schedule.scale() * std::pow(static_cast<double>(config.model().d_model()), -0.5) *
         std::min(std::pow(s, -0.5), s * std::pow(warmup, -1.5));
}

}  // namespace psformer
