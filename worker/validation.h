// Validation: the label-smoothed loss (what training minimises), the negative log-likelihood and
// its perplexity, and the teacher-forced argmax accuracy of a model over the validation batches,
// without dropout; when validation runs and what ends training early. Shared by the local trainer
// and the worker loop so the two validate at the same steps and report the same figures for the
// same weights.
#ifndef PSFORMER_WORKER_VALIDATION_H_
#define PSFORMER_WORKER_VALIDATION_H_

#include <cmath>
#include <string>
#include <vector>

#include "common/metrics_log.h"
#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/data/batch.h"
#include "worker/model/transformer.h"
#include "worker/valid_bleu.h"

namespace psformer {

struct ValidationResult {
  double loss = 0;      // label-smoothed, per target token
  double nll = 0;       // negative log-likelihood per target token
  double ppl = 0;       // perplexity: exp(nll)
  double bleu = NAN;    // validation BLEU (worker/valid_bleu.h), NaN when not measured
  double accuracy = 0;  // fraction of target tokens whose argmax is right
  int64_t tokens = 0;
};

// params: the flat parameter vector on the model's backend.
ValidationResult Validate(Transformer<float>* model, const float* params, const std::vector<Batch>& batches);
// Validate, then with `bleu` (may be null) validation BLEU too: the result's bleu is set and
// `bleu_hypotheses` (if given) receives the translations it scored. Fails as ValidBleu::Score does.
StatusOr<ValidationResult> ValidateWithBleu(Transformer<float>* model, const float* params,
                                            const std::vector<Batch>& batches, ValidBleu* bleu,
                                            std::vector<std::string>* bleu_hypotheses = nullptr);

// Whether the weights after `step` are validated: every training.valid_every steps (0: never).
bool ValidationDue(const proto::TrainingConfig& training, int64_t step);
// Why validation `v` ends training: valid_accuracy reached training.stop_at_valid_accuracy or
// valid_bleu reached training.stop_at_valid_bleu (each when > 0); empty to go on.
std::string EarlyStopReason(const proto::TrainingConfig& training, const ValidationResult& v);

// The metrics.jsonl line of a validation after `step`: valid_loss (label-smoothed), valid_nll_loss,
// valid_ppl (from the NLL), valid_accuracy, and valid_bleu when measured.
MetricsLine ValidationMetrics(int64_t step, const ValidationResult& v);
// The same figures for a log or console line: "valid loss 4.49  nll 4.10  ppl 60.3  accuracy 0.281".
std::string ValidationSummary(const ValidationResult& v);

}  // namespace psformer

#endif  // PSFORMER_WORKER_VALIDATION_H_
