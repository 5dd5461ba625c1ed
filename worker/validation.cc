#include "worker/validation.h"

#include <cstdio>
#include <utility>

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

StatusOr<ValidationResult> ValidateWithBleu(Transformer<float>* model, const float* params,
                                            const std::vector<Batch>& batches, ValidBleu* bleu,
                                            std::vector<std::string>* bleu_hypotheses) {
  ValidationResult result = Validate(model, params, batches);
  if (bleu == nullptr) return result;
  PSF_ASSIGN_OR_RETURN(ValidBleu::Result scored, bleu->Score(params));
  result.bleu = scored.bleu;
  if (bleu_hypotheses != nullptr) *bleu_hypotheses = std::move(scored.hypotheses);
  return result;
}

bool ValidationDue(const proto::TrainingConfig& training, int64_t step) {
  return training.valid_every() > 0 && step % training.valid_every() == 0;
}

std::string EarlyStopReason(const proto::TrainingConfig& training, const ValidationResult& v) {
  // The figure as the validation line shows it, the threshold as the config has it ("0.99").
  char text[160];
  if (training.stop_at_valid_accuracy() > 0 && v.accuracy >= training.stop_at_valid_accuracy()) {
    std::snprintf(text, sizeof(text), "valid_accuracy %.3f reached training.stop_at_valid_accuracy %g", v.accuracy,
                  static_cast<double>(training.stop_at_valid_accuracy()));
    return text;
  }
  if (training.stop_at_valid_bleu() > 0 && v.bleu >= training.stop_at_valid_bleu()) {
    std::snprintf(text, sizeof(text), "valid_bleu %.2f reached training.stop_at_valid_bleu %g", v.bleu,
                  static_cast<double>(training.stop_at_valid_bleu()));
    return text;
  }
  return "";
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
