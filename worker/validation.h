// Validation: the label-smoothed loss and teacher-forced argmax accuracy of a model over the
// validation batches, without dropout. Shared by the local trainer and the worker loop so the
// two report the same figures for the same weights.
#ifndef PSFORMER_WORKER_VALIDATION_H_
#define PSFORMER_WORKER_VALIDATION_H_

#include <vector>

#include "worker/data/batch.h"
#include "worker/model/transformer.h"

namespace psformer {

struct ValidationResult {
  double loss = 0;      // per target token
  double accuracy = 0;  // fraction of target tokens whose argmax is right
  int64_t tokens = 0;
};

// params: the flat parameter vector on the model's backend.
ValidationResult Validate(Transformer<float>* model, const float* params, const std::vector<Batch>& batches);

}  // namespace psformer

#endif  // PSFORMER_WORKER_VALIDATION_H_
