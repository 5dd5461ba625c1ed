// A step whose loss is not finite: the training diverged. Every later step, a restarted worker
// and a rollback to the checkpoint that led there compute from the same weights and diverge
// again, so the job stops once, saying so (docs/failure-model.md, A diverged loss).
#ifndef PSFORMER_WORKER_TRAIN_LOSS_CHECK_H_
#define PSFORMER_WORKER_TRAIN_LOSS_CHECK_H_

#include <cstdint>

#include "common/status.h"

namespace psformer {

// OK when `loss_sum` (the step's summed loss) is finite. Otherwise sends the supervisor a fatal
// report (the role then exits with kExitDoNotRestart) and returns Corruption "the loss is not
// finite at step N ...", with what to do about it.
Status CheckLossIsFinite(int64_t step, double loss_sum);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRAIN_LOSS_CHECK_H_
