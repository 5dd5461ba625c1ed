#include "worker/translate/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "common/logging.h"
#include "common/utf8.h"
#include "worker/translate/tokenizer_13a.h"

namespace psformer {
namespace {

// A tokenized segment and where its tokens lie. Tokens are separated by single spaces, so the
// n-gram of tokens j..j+n-1 is the contiguous substring from begin[j] to end[j+n-1]: n-grams
// can be hashed as string_views into `text`, with no joining.
struct TokenizedSegment {
  std::string text;
  std::vector<size_t> begin, end;  // (tokens,) byte offsets into text

  explicit TokenizedSegment(std::string_view raw) : text(Tokenize13a(raw)) {
    size_t i = 0;
    while (i < text.size()) {
      const size_t space = text.find(' ', i);
      const size_t stop = space == std::string::npos ? text.size() : space;
      begin.push_back(i);
      end.push_back(stop);
      i = stop + 1;
    }
  }
  int64_t length() const { return static_cast<int64_t>(begin.size()); }
  std::string_view NGram(size_t first, int n) const {
    return std::string_view(text).substr(begin[first], end[first + n - 1] - begin[first]);
  }
};

using NGramCounts = std::unordered_map<std::string_view, int64_t>;

void CountNGrams(const TokenizedSegment& segment, int n, NGramCounts* counts) {
  counts->clear();
  for (int64_t j = 0; j + n <= segment.length(); ++j) ++(*counts)[segment.NGram(j, n)];
}

// sacreBLEU's _get_closest_ref_len: the first reference at the smallest distance, replaced by a
// later one at the same distance only if shorter.
int64_t ClosestRefLen(int64_t hyp_len, const std::vector<TokenizedSegment>& refs) {
  int64_t closest_diff = -1, closest_len = -1;
  for (const TokenizedSegment& ref : refs) {
    const int64_t diff = std::llabs(hyp_len - ref.length());
    if (closest_diff == -1 || diff < closest_diff) {
      closest_diff = diff;
      closest_len = ref.length();
    } else if (diff == closest_diff && ref.length() < closest_len) {
      closest_len = ref.length();
    }
  }
  return closest_len;
}

// sacreBLEU's my_log: log, with log(0) floored to a large negative number rather than -inf.
double FlooredLog(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

}  // namespace

void BleuStats::Add(const BleuStats& other) {
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    correct[n] += other.correct[n];
    total[n] += other.total[n];
  }
}

BleuStats SegmentBleuStats(std::string_view hyp, const std::vector<std::string_view>& refs) {
  PSF_CHECK(!refs.empty());
  const TokenizedSegment hyp_tokens(hyp);
  std::vector<TokenizedSegment> ref_tokens;
  ref_tokens.reserve(refs.size());  // no reallocation: the n-gram views point into these texts
  for (std::string_view ref : refs) ref_tokens.emplace_back(ref);

  BleuStats stats;
  stats.hyp_len = hyp_tokens.length();
  stats.ref_len = ClosestRefLen(stats.hyp_len, ref_tokens);
  NGramCounts max_ref, one_ref, hyp_counts;
  for (int n = 1; n <= kBleuMaxOrder; ++n) {
    max_ref.clear();
    for (const TokenizedSegment& ref : ref_tokens) {
      CountNGrams(ref, n, &one_ref);
      for (const auto& [ngram, count] : one_ref) {
        int64_t& best = max_ref[ngram];
        best = std::max(best, count);
      }
    }
    CountNGrams(hyp_tokens, n, &hyp_counts);
    for (const auto& [ngram, count] : hyp_counts) {
      stats.total[n - 1] += count;
      const auto found = max_ref.find(ngram);
      if (found != max_ref.end()) stats.correct[n - 1] += std::min(count, found->second);
    }
  }
  return stats;
}

BleuScore BleuFromStats(const BleuStats& stats) {
  BleuScore result;
  result.hyp_len = stats.hyp_len;
  result.ref_len = stats.ref_len;
  result.ratio = stats.ref_len != 0 ? static_cast<double>(stats.hyp_len) / static_cast<double>(stats.ref_len) : 0.0;
  if (stats.hyp_len < stats.ref_len) {
    result.brevity_penalty =
        stats.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(stats.ref_len) / static_cast<double>(stats.hyp_len))
                          : 0.0;
  }
  // With no match at any order sacreBLEU returns 0 at once, precisions all 0.
  if (std::all_of(stats.correct.begin(), stats.correct.end(), [](int64_t c) { return c == 0; })) {
    return result;
  }
  double smooth = 1.0;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    // An order the hypotheses are too short to have ends the loop; it and the orders above keep
    // precision 0, whose floored log makes the score 0 (sacreBLEU without effective order).
    if (stats.total[n] == 0) break;
    const auto total = static_cast<double>(stats.total[n]);
    if (stats.correct[n] == 0) {
      smooth *= 2.0;
      result.precisions[n] = 100.0 / (smooth * total);
    } else {
      result.precisions[n] = 100.0 * static_cast<double>(stats.correct[n]) / total;
    }
  }
  double log_sum = 0.0;
  for (double p : result.precisions) log_sum += FlooredLog(p);
  result.score = result.brevity_penalty * std::exp(log_sum / kBleuMaxOrder);
  return result;
}

StatusOr<BleuScore> CorpusBleu(const std::vector<std::string>& hyps,
                               const std::vector<std::vector<std::string>>& refs) {
  if (refs.empty()) return Status::InvalidArgument("BLEU needs at least one reference stream");
  for (size_t k = 0; k < refs.size(); ++k) {
    if (refs[k].size() != hyps.size()) {
      return Status::InvalidArgument("reference stream " + std::to_string(k + 1) + " has " +
                                     std::to_string(refs[k].size()) + " segments but there are " +
                                     std::to_string(hyps.size()) + " hypotheses");
    }
  }
  const auto check_utf8 = [](const std::string& text, const std::string& stream, size_t i) {
    size_t offset = 0;
    if (IsValidUtf8(text, &offset)) return Status::Ok();
    return Status::InvalidArgument(stream + " segment " + std::to_string(i + 1) + ": invalid UTF-8 at byte " +
                                   std::to_string(offset + 1));
  };
  BleuStats corpus;
  std::vector<std::string_view> segment_refs(refs.size());
  for (size_t i = 0; i < hyps.size(); ++i) {
    PSF_RETURN_IF_ERROR(check_utf8(hyps[i], "hypothesis", i));
    for (size_t k = 0; k < refs.size(); ++k) {
      PSF_RETURN_IF_ERROR(check_utf8(refs[k][i], "reference stream " + std::to_string(k + 1), i));
      segment_refs[k] = refs[k][i];
    }
    corpus.Add(SegmentBleuStats(hyps[i], segment_refs));
  }
  return BleuFromStats(corpus);
}

std::string FormatBleuLine(const BleuScore& score) {
  // printf's %.Nf rounds the exact binary value to nearest, ties to even, like Python's format().
  char buffer[256];
  const auto& p = score.precisions;
  std::snprintf(buffer, sizeof(buffer),
                "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", score.score,
                p[0], p[1], p[2], p[3], score.brevity_penalty, score.ratio, static_cast<long long>(score.hyp_len),
                static_cast<long long>(score.ref_len));
  return buffer;
}

}  // namespace psformer
