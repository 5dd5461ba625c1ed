// The learning-rate schedule (docs/paper.md, Training):
//   lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)
// a linear rise for warmup_steps, then inverse square-root decay. Steps are 1-based.
#ifndef PSFORMER_COMMON_LR_SCHEDULE_H_
#define PSFORMER_COMMON_LR_SCHEDULE_H_

#include <cstdint>

#include "common/proto/config.pb.h"

namespace psformer {

// REQUIRES: step >= 1 and a validated config.
double LearningRate(const proto::JobConfig& config, int64_t step);

}  // namespace psformer

#endif  // PSFORMER_COMMON_LR_SCHEDULE_H_
