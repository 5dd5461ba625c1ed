#include "worker/validation.h"

#include <cstdio>

namespace psformer {

ValidationResult Validate(Transformer<float>* model, const float* params, const std::vector<Batch>& batches) {
  ValidationResult result;
  double loss = 0, nll = 0;
  int64_t correct = 0;
  for (const Batch& batch : batches) {
    const StepStats s = model->Evaluate(params, batch);
    loss += s.loss_sum;
    nll += s.nll_sum;
    correct += s.correct;
    result.tokens += s.target_tokens;
  }
  if (result.tokens > 0) {
    result.loss = loss / static_cast<double>(result.tokens);
    result.nll = nll / static_cast<double>(result.tokens);
    result.ppl = std::exp(result.nll);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.tokens);
  }
  return result;
}

MetricsLine ValidationMetrics(int64_t step, const ValidationResult& v) {
  MetricsLine line;
  line.Add("step", step).Add("valid_loss", v.loss).Add("valid_nll_loss", v.nll).Add("valid_ppl", v.ppl);
  line.Add("valid_accuracy", v.accuracy);
  if (std::isfinite(v.bleu)) line.Add("valid_bleu", v.bleu);
  return line;
}

std::string ValidationSummary(const ValidationResult& v) {
  char text[128];
  std::snprintf(text, sizeof(text), "valid loss %.3f  nll %.3f  ppl %.2f  accuracy %.3f", v.loss, v.nll, v.ppl,
                v.accuracy);
  if (!std::isfinite(v.bleu)) return text;
  char bleu[32];
  std::snprintf(bleu, sizeof(bleu), "  BLEU %.2f", v.bleu);
  return std::string(text) + bleu;
}

}  // namespace psformer
