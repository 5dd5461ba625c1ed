#include "worker/validation.h"

namespace psformer {

ValidationResult Validate(Transformer<float>* model, const float* params, const std::vector<Batch>& batches) {
  ValidationResult result;
  double loss = 0;
  int64_t correct = 0;
  for (const Batch& batch : batches) {
    const StepStats s = model->Evaluate(params, batch);
    loss += s.loss_sum;
    correct += s.correct;
    result.tokens += s.target_tokens;
  }
  if (result.tokens > 0) {
    result.loss = loss / static_cast<double>(result.tokens);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.tokens);
  }
  return result;
}

}  // namespace psformer
