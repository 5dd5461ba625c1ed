// Corpus BLEU, identical to sacreBLEU's default `corpus_bleu` (sacreBLEU 2.x): 13a tokenization
// (translate/tokenizer_13a.h), case kept, n-grams up to order 4, clipped counts against the
// per-n-gram maximum over a segment's references, the reference length closest to the
// hypothesis length (the shorter on a tie), brevity penalty, and sacreBLEU's "exp" smoothing as
// it applies at corpus level (an order with no match gets 100 / (2^k * total), k counting such
// orders). Statistics are summed over the corpus before precisions are taken, as sacreBLEU does.
#ifndef PSFORMER_WORKER_TRANSLATE_BLEU_H_
#define PSFORMER_WORKER_TRANSLATE_BLEU_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace psformer {

inline constexpr int kBleuMaxOrder = 4;

// The sufficient statistics of BLEU; they add up over segments.
struct BleuStats {
  int64_t hyp_len = 0;                           // hypothesis tokens
  int64_t ref_len = 0;                           // closest reference tokens
  std::array<int64_t, kBleuMaxOrder> correct{};  // clipped matching n-grams, n = 1..4
  std::array<int64_t, kBleuMaxOrder> total{};    // hypothesis n-grams, n = 1..4

  void Add(const BleuStats& other);
};

struct BleuScore {
  double score = 0;                                // BLEU, 0..100
  std::array<double, kBleuMaxOrder> precisions{};  // percent, n = 1..4 (smoothed as above)
  double brevity_penalty = 1;                      // 1 when hyp_len >= ref_len
  double ratio = 0;                                // hyp_len / ref_len, 0 when ref_len is 0
  int64_t hyp_len = 0;
  int64_t ref_len = 0;
};

// Statistics of one segment: `hyp` and each of `refs` untokenized text. An empty reference counts
// as a reference of length 0 (as in sacreBLEU). REQUIRES: valid UTF-8 (common/utf8.h) and
// at least one reference.
BleuStats SegmentBleuStats(std::string_view hyp, const std::vector<std::string_view>& refs);

// The score from summed statistics, following sacreBLEU's compute_bleu step by step (same
// floating-point operations in the same order, so the printed line is the same).
BleuScore BleuFromStats(const BleuStats& stats);

// Corpus BLEU of `hyps` against `refs`, where refs[k][i] is the k-th reference of segment i.
// InvalidArgument if there is no reference stream, a stream's length differs from hyps.size(),
// or a segment is not valid UTF-8 (the message names the stream and the 1-based segment).
StatusOr<BleuScore> CorpusBleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs);

// sacreBLEU's text line without signature, e.g.
// "BLEU = 32.51 63.4/38.2/25.1/16.8 (BP = 1.000 ratio = 1.025 hyp_len = 1234 ref_len = 1204)".
std::string FormatBleuLine(const BleuScore& score);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_BLEU_H_
