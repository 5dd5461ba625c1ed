#include "worker/translate/beam_search.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <tuple>

#include "common/logging.h"
#include "worker/data/batch.h"

namespace psformer {
namespace {

struct Hypothesis {
  std::vector<int32_t> tokens;  // y1 .. yt
  double log_prob = 0;
  int32_t row = 0;  // the decoder row holding its state
};

struct Candidate {
  double log_prob;
  int hypothesis;  // index into the sentence's live hypotheses
  int32_t token;
};

// Better first: higher log-probability, then earlier hypothesis, then smaller id.
bool Better(const Candidate& a, const Candidate& b) {
  return std::tie(b.log_prob, a.hypothesis, a.token) < std::tie(a.log_prob, b.hypothesis, b.token);
}

struct SentenceSearch {
  int max_len = 0;
  bool done = false;
  std::vector<Hypothesis> live;
  std::vector<Translation> finished;
};

// `value` as a person writes it: -1, 0.25, 1e+30 (std::to_string gave -1.000000).
std::string AsWritten(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

Status ValidateBeamSearchOptions(const BeamSearchOptions& options) {
  if (options.beam < 1)
    return Status::InvalidArgument("beam size must be at least 1, got " + std::to_string(options.beam));
  if (!(options.alpha >= 0) || !std::isfinite(options.alpha)) {
    return Status::InvalidArgument("length penalty alpha must be a finite number >= 0, got " +
                                   AsWritten(options.alpha));
  }
  if (!(options.max_len_a >= 0) || !std::isfinite(options.max_len_a)) {
    return Status::InvalidArgument("max-len-a must be a finite number >= 0, got " + AsWritten(options.max_len_a));
  }
  if (options.max_len_b < 0) {
    return Status::InvalidArgument("max-len-b must be >= 0, got " + std::to_string(options.max_len_b));
  }
  if (options.max_len_a == 0 && options.max_len_b == 0) {
    // Every output would be empty, and the run would look like a translation.
    return Status::InvalidArgument(
        "max-len-a and max-len-b are both 0: every translation would be empty; "
        "give a maximum output length above 0");
  }
  return Status::Ok();
}

double LengthPenalty(int length, double alpha) { return std::pow((5.0 + length) / 6.0, alpha); }

template <typename T>
BeamSearch<T>::BeamSearch(const proto::ModelConfig& config, int vocab, Backend<T>* backend,
                          const BeamSearchOptions& options)
    : decoder_(config, vocab, backend), options_(options), vocab_(vocab), max_positions_(config.max_positions()) {
  PSF_CHECK(ValidateBeamSearchOptions(options).ok());
}

namespace {

// Fails, naming sentence `s`, when it is too long for the model or holds an id that is not a
// source token.
Status CheckSource(int s, const std::vector<int32_t>& source, int vocab, int max_positions) {
  const int n = static_cast<int>(source.size());
  if (n + 1 > max_positions) {
    return Status::InvalidArgument("sentence " + std::to_string(s) + " has " + std::to_string(n) +
                                   " tokens; the model takes at most " + std::to_string(max_positions - 1));
  }
  for (int32_t id : source) {
    if (id < 0 || id >= vocab || id == kPadId || id == kBosId || id == kEosId) {
      return Status::InvalidArgument("sentence " + std::to_string(s) + " has token id " + std::to_string(id) +
                                     ", not a source token of a vocabulary of " + std::to_string(vocab));
    }
  }
  return Status::Ok();
}

// Whether no live hypothesis of `sentence` can still beat its best finished one (with k
// finished, or none live, it is done anyway).
bool SearchIsOver(const SentenceSearch& sentence, int k, double alpha) {
  if (sentence.live.empty() || static_cast<int>(sentence.finished.size()) >= k) return true;
  if (sentence.finished.empty()) return false;
  double best = sentence.finished[0].score;
  for (const Translation& f : sentence.finished) best = std::max(best, f.score);
  const double most_penalty = LengthPenalty(sentence.max_len + 1, alpha);
  double reachable = -INFINITY;
  for (const Hypothesis& hyp : sentence.live) reachable = std::max(reachable, hyp.log_prob / most_penalty);
  return best >= reachable;
}

// Step t of one sentence: its live hypotheses' best 2k continuations (log_probs: one row of
// vocab per decoder row) become at most k live ones, whose decoder rows' parents are appended
// to `parents`, and at most k finished ones (eos among the best k).
void Expand(SentenceSearch& sentence, int t, const std::vector<double>& log_probs, int vocab, int k, double alpha,
            std::vector<Candidate>& candidates, std::vector<int32_t>* parents) {
  candidates.clear();
  for (int h = 0; h < static_cast<int>(sentence.live.size()); ++h) {
    const Hypothesis& hyp = sentence.live[h];
    const double* row = log_probs.data() + static_cast<size_t>(hyp.row) * vocab;
    if (t >= sentence.max_len) {
      candidates.push_back({hyp.log_prob + row[kEosId], h, kEosId});
      continue;
    }
    for (int32_t v = 0; v < vocab; ++v) {
      if (v != kPadId && v != kBosId) candidates.push_back({hyp.log_prob + row[v], h, v});
    }
  }
  const size_t keep = std::min(candidates.size(), static_cast<size_t>(2 * k));
  std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), Better);
  std::vector<Hypothesis> next;
  for (size_t j = 0; j < keep; ++j) {
    const Candidate& c = candidates[j];
    const Hypothesis& parent = sentence.live[c.hypothesis];
    if (c.token == kEosId) {
      if (j < static_cast<size_t>(k)) {
        const double score = c.log_prob / LengthPenalty(t + 1, alpha);
        sentence.finished.push_back(Translation{parent.tokens, c.log_prob, score});
      }
    } else if (static_cast<int>(next.size()) < k) {
      Hypothesis child{parent.tokens, c.log_prob, static_cast<int32_t>(parents->size())};
      child.tokens.push_back(c.token);
      parents->push_back(parent.row);
      next.push_back(std::move(child));
    }
  }
  sentence.live = std::move(next);
}

// The finished translation with the best score. REQUIRES: one finished (eos is forced at
// max_len, so every sentence finishes).
Translation Best(const SentenceSearch& sentence) {
  const std::vector<Translation>& finished = sentence.finished;
  PSF_CHECK(!finished.empty());
  size_t best = 0;
  for (size_t i = 1; i < finished.size(); ++i) {
    if (finished[i].score > finished[best].score) best = i;
  }
  return finished[best];
}

}  // namespace

template <typename T>
StatusOr<std::vector<Translation>> BeamSearch<T>::Translate(const T* params,
                                                            const std::vector<std::vector<int32_t>>& sources) {
  const int sentences = static_cast<int>(sources.size());
  const int k = options_.beam;
  std::vector<Translation> results(sentences);
  if (sentences == 0) return results;
  int src_len = 0;
  std::vector<SentenceSearch> search(sentences);
  for (int s = 0; s < sentences; ++s) {
    PSF_RETURN_IF_ERROR(CheckSource(s, sources[s], vocab_, max_positions_));
    const int n = static_cast<int>(sources[s].size());
    src_len = std::max(src_len, n + 1);
    const double limit = std::floor(options_.max_len_a * n + options_.max_len_b);
    search[s].max_len = static_cast<int>(std::min<double>(limit, max_positions_ - 1));
    search[s].live.push_back(Hypothesis{{}, 0.0, s});
  }
  std::vector<int32_t> src(static_cast<size_t>(sentences) * src_len, kPadId);  // (sentences, src_len)
  for (int s = 0; s < sentences; ++s) {
    std::copy(sources[s].begin(), sources[s].end(), src.begin() + static_cast<size_t>(s) * src_len);
    src[static_cast<size_t>(s) * src_len + sources[s].size()] = kEosId;
  }
  decoder_.Start(params, src, sentences, src_len);

  std::vector<int32_t> tokens(sentences, kBosId);  // the last token of each live hypothesis
  std::vector<double> log_probs;                   // (live rows, vocab)
  std::vector<Candidate> candidates;
  for (int t = 0; !tokens.empty(); ++t) {
    decoder_.Step(tokens, &log_probs);
    std::vector<int32_t> parents;
    tokens.clear();
    for (SentenceSearch& sentence : search) {
      if (sentence.done) continue;
      Expand(sentence, t, log_probs, vocab_, k, options_.alpha, candidates, &parents);
      if (SearchIsOver(sentence, k, options_.alpha)) {
        sentence.done = true;
        // The live hypotheses' rows were already claimed: drop them again.
        parents.resize(parents.size() - sentence.live.size());
        sentence.live.clear();
        continue;
      }
      for (const Hypothesis& hyp : sentence.live) tokens.push_back(hyp.tokens.back());
    }
    if (!tokens.empty()) decoder_.Reorder(parents);
  }
  for (int s = 0; s < sentences; ++s) results[s] = Best(search[s]);
  return results;
}

template class BeamSearch<float>;
template class BeamSearch<double>;

}  // namespace psformer
