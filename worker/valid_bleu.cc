#include "worker/valid_bleu.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "common/write_file.h"
#include "worker/translate/bleu.h"

namespace psformer {
namespace {

// The tokens of row `row` of a (B, L) matrix, up to its eos (or pad).
std::vector<int32_t> RowTokens(const std::vector<int32_t>& matrix, int32_t len, int32_t row) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < len; ++i) {
    const int32_t t = matrix[static_cast<size_t>(row) * len + i];
    if (t == kEosId || t == kPadId) break;
    tokens.push_back(t);
  }
  return tokens;
}

// Sentences translated at once: bounds the decoder's memory whatever valid_bleu_sentences is.
constexpr size_t kSentencesPerBatch = 64;

}  // namespace

StatusOr<std::unique_ptr<ValidBleu>> ValidBleu::Create(const proto::JobConfig& config, int vocab_size,
                                                       const std::vector<Batch>& valid, Backend<float>* backend) {
  BeamSearchOptions options;
  options.beam = config.training().valid_bleu_beam();
  PSF_RETURN_IF_ERROR(ValidateBeamSearchOptions(options).WithContext("training.valid_bleu_beam"));
  std::unique_ptr<ValidBleu> bleu(new ValidBleu(config, vocab_size, backend, options));
  if (config.data().task() == proto::DataConfig::CORPUS) {
    const std::string spm = (std::filesystem::path(config.data().train_dir()) / "spm.model").string();
    PSF_ASSIGN_OR_RETURN(SubwordVocabulary vocabulary, SubwordVocabulary::FromFile(spm));
    bleu->vocabulary_.emplace(std::move(vocabulary));
  }
  // Pairs in corpus order, whatever order the batches hold them in.
  std::map<int64_t, std::pair<std::vector<int32_t>, std::vector<int32_t>>> pairs;
  for (const Batch& batch : valid) {
    for (int32_t s = 0; s < batch.sentences; ++s) {
      const int64_t id =
          s < static_cast<int32_t>(batch.pair_ids.size()) ? batch.pair_ids[s] : static_cast<int64_t>(pairs.size());
      pairs[id] = {RowTokens(batch.src, batch.src_len, s), RowTokens(batch.tgt_out, batch.tgt_len, s)};
    }
  }
  const size_t wanted = static_cast<size_t>(config.training().valid_bleu_sentences());
  for (const auto& [id, pair] : pairs) {
    if (bleu->sources_.size() == wanted) break;
    bleu->sources_.push_back(pair.first);
    bleu->references_.push_back(bleu->Detokenize(pair.second));
  }
  if (bleu->sources_.empty()) {
    // CheckPreparedCorpus refuses such a job before it starts, naming the file; this is the
    // worker's last word for one that skipped it.
    return Status::InvalidArgument(
        "training.valid_bleu_sentences = " + std::to_string(config.training().valid_bleu_sentences()) +
        ": the corpus has no validation sentences (no valid.bin in data.train_dir, or an empty one)");
  }
  return bleu;
}

std::string ValidBleu::Detokenize(const std::vector<int32_t>& tokens) const {
  if (vocabulary_) return vocabulary_->Decode(std::vector<int>(tokens.begin(), tokens.end()));
  std::string text;
  for (int32_t t : tokens) {
    if (!text.empty()) text += ' ';
    text += std::to_string(t);
  }
  return text;
}

StatusOr<ValidBleu::Result> ValidBleu::Score(const float* params) {
  Result result;
  for (size_t begin = 0; begin < sources_.size(); begin += kSentencesPerBatch) {
    const size_t end = std::min(sources_.size(), begin + kSentencesPerBatch);
    const std::vector<std::vector<int32_t>> batch(sources_.begin() + begin, sources_.begin() + end);
    PSF_ASSIGN_OR_RETURN(const std::vector<Translation> translations, search_.Translate(params, batch));
    for (const Translation& t : translations) result.hypotheses.push_back(Detokenize(t.tokens));
  }
  PSF_ASSIGN_OR_RETURN(const BleuScore score, CorpusBleu(result.hypotheses, {references_}));
  result.bleu = score.score;
  return result;
}

namespace {

Status WriteLines(const std::filesystem::path& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return WriteFileAtomically(path.string(), text);
}

}  // namespace

Status WriteValidBleuFiles(const std::string& run_dir, int64_t step, const std::vector<std::string>& references,
                           const std::vector<std::string>& hypotheses) {
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "valid_bleu";
  PSF_RETURN_IF_ERROR(MakeDirectoriesInRun(run_dir, dir.string()));
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld.hyp", static_cast<long long>(step));
  PSF_RETURN_IF_ERROR(WriteLines(dir / "reference.txt", references));
  return WriteLines(dir / name, hypotheses);
}

}  // namespace psformer
