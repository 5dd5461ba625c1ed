// Batched beam search over IncrementalDecoder (docs/paper.md: beam 4, length penalty alpha 0.6,
// maximum output length input + 50).
//
// Definitions (the tests' brute-force reference uses the same ones):
// - A hypothesis Y is y1 .. ym followed by eos; |Y| = m + 1 counts the eos. Its log-probability
//   is log p(Y | X) = sum of the decoder's next-token log-probabilities, eos included; its score
//   is log p(Y | X) / lp(Y), with the GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha.
// - m <= max_len(X) = min(floor(max_len_a * n + max_len_b), max_positions - 1), n the source's
//   token count without its eos; at m = max_len(X) only eos may follow. pad and bos are never
//   produced.
// - Each step extends every live hypothesis of a sentence by every token and ranks the candidates
//   by log-probability (ties: earlier hypothesis, then smaller id). Walking the best 2k: an eos
//   candidate among the best k finishes; other candidates stay live until k are live.
// - A sentence is done when k hypotheses have finished, when no live hypothesis can beat the best
//   finished score (log-probabilities only fall and lp grows at most to lp(max_len + 1), so a live
//   hypothesis with log-probability s < 0 can reach at most s / lp(max_len + 1)), or when none is
//   live. The result is the finished hypothesis with the best score (ties: the earliest found).
// With k = 1 this is greedy decoding: the argmax token each step until eos.
#ifndef PSFORMER_WORKER_TRANSLATE_BEAM_SEARCH_H_
#define PSFORMER_WORKER_TRANSLATE_BEAM_SEARCH_H_

#include <cstdint>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/backend/backend.h"
#include "worker/translate/incremental_decoder.h"

namespace psformer {

struct BeamSearchOptions {
  int beam = 4;            // k >= 1; 1 is greedy decoding
  double alpha = 0.6;      // length penalty exponent >= 0 (0: plain log-probability)
  double max_len_a = 1.0;  // max_len = a * source length + b (the paper's input + 50)
  int max_len_b = 50;
};

// Checks the ranges above; the error names the option.
Status ValidateBeamSearchOptions(const BeamSearchOptions& options);

// lp(Y) for |Y| = length (eos included).
double LengthPenalty(int length, double alpha);

struct Translation {
  std::vector<int32_t> tokens;  // y1 .. ym, without eos
  double log_prob = 0;          // log p(Y | X), eos included
  double score = 0;             // log_prob / LengthPenalty(m + 1, alpha)
};

template <typename T>
class BeamSearch {
 public:
  // REQUIRES: valid options, a validated config, vocab > kNumReservedIds.
  BeamSearch(const proto::ModelConfig& config, int vocab, Backend<T>* backend, const BeamSearchOptions& options);

  // Translates a batch in one go: sources are token ids without eos. params: the flat vector on
  // the backend's device. Returns one Translation per source, in order. Fails, naming the
  // sentence, when a source has an id outside [0, vocab) or is longer than max_positions - 1.
  StatusOr<std::vector<Translation>> Translate(const T* params, const std::vector<std::vector<int32_t>>& sources);

  const ParamLayout& layout() const { return decoder_.layout(); }

 private:
  IncrementalDecoder<T> decoder_;
  BeamSearchOptions options_;
  int vocab_;
  int max_positions_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_BEAM_SEARCH_H_
