// Validation BLEU during training: the first training.valid_bleu_sentences sentence pairs of the
// validation set (in corpus order) are translated with the current weights (greedy, or beam search
// with training.valid_bleu_beam), detokenized, and scored with the project's corpus BLEU
// (translate/bleu.h), the score `psformer bleu` prints for the same hypotheses and references.
//
// Detokenizing: a corpus's pieces go through its SentencePiece model (data.train_dir/spm.model);
// the copy task's tokens are written as their ids, separated by spaces.
#ifndef PSFORMER_WORKER_VALID_BLEU_H_
#define PSFORMER_WORKER_VALID_BLEU_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/backend/backend.h"
#include "worker/data/batch.h"
#include "worker/data/subword_vocabulary.h"
#include "worker/translate/beam_search.h"

namespace psformer {

class ValidBleu {
 public:
  // `valid`: the validation batches; `backend` outlives the object. IoError/InvalidArgument if the
  // corpus's spm.model cannot be read.
  static StatusOr<std::unique_ptr<ValidBleu>> Create(const proto::JobConfig& config, int vocab_size,
                                                     const std::vector<Batch>& valid, Backend<float>* backend);

  struct Result {
    double bleu = 0;                      // 0..100
    std::vector<std::string> hypotheses;  // detokenized, one a sentence, in the order of references()
  };
  // params: the flat parameter vector on the backend.
  StatusOr<Result> Score(const float* params);

  // The detokenized references, one a sentence.
  const std::vector<std::string>& references() const { return references_; }

 private:
  ValidBleu(const proto::JobConfig& config, int vocab_size, Backend<float>* backend, BeamSearchOptions options)
      : search_(config.model(), vocab_size, backend, options) {}
  std::string Detokenize(const std::vector<int32_t>& tokens) const;

  BeamSearch<float> search_;
  std::optional<SubwordVocabulary> vocabulary_;  // none for the copy task
  std::vector<std::vector<int32_t>> sources_;    // without eos
  std::vector<std::string> references_;
};

// Writes RUN_DIR/valid_bleu/reference.txt and step-NNNNNNNN.hyp, one sentence a line, so that
// `psformer bleu --hyp .../step-NNNNNNNN.hyp --ref .../reference.txt` gives the same score.
Status WriteValidBleuFiles(const std::string& run_dir, int64_t step, const std::vector<std::string>& references,
                           const std::vector<std::string>& hypotheses);

}  // namespace psformer

#endif  // PSFORMER_WORKER_VALID_BLEU_H_
