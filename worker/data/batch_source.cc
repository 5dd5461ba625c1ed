#include "worker/data/batch_source.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/model_file.h"
#include "common/read_file.h"
#include "worker/data/copy_task.h"
#include "worker/data/corpus_file.h"
#include "worker/data/sampled_batch_source.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {
namespace {

// Longest padded row (tokens + eos/bos) of a corpus, which the model must accept.
int32_t LongestRow(const ParallelCorpus& corpus) {
  int32_t longest = 0;
  for (int64_t i = 0; i < corpus.size(); ++i) {
    longest = std::max({longest, corpus.src_length(i) + 1, corpus.tgt_length(i) + 1});
  }
  return longest;
}

// model.vocab_size, where set, is the corpus's `pieces` (CheckPreparedCorpus).
Status VocabularyMatches(const proto::JobConfig& config, int pieces) {
  const int model_vocab = config.model().vocab_size();
  if (model_vocab == 0 || model_vocab == pieces) return Status::Ok();
  const std::string spm = (std::filesystem::path(config.data().train_dir()) / "spm.model").string();
  return Status::InvalidArgument(
      "model.vocab_size = " + std::to_string(model_vocab) + " but " + spm + " has " + std::to_string(pieces) +
      " pieces (the servers would size the embedding for " + std::to_string(model_vocab) + " rows, the workers for " +
      std::to_string(pieces) + "); set model.vocab_size=" + std::to_string(pieces) +
      ", or 0 to take it from the data, or prepare the corpus with --vocab-size " + std::to_string(model_vocab));
}

std::string Where(const std::filesystem::path& dir) { return "data.train_dir = \"" + dir.string() + "\""; }

// A corpus directory's spm.model: its vocabulary and the digest a model trained on it records.
struct SentencePieceFile {
  SubwordVocabulary vocabulary;
  std::string digest;  // SentencePieceDigest
};

StatusOr<SentencePieceFile> ReadSentencePiece(const std::filesystem::path& dir) {
  const std::string path = (dir / "spm.model").string();
  PSF_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path, "SentencePiece model", kMaxSentencePieceBytes));
  PSF_ASSIGN_OR_RETURN(SubwordVocabulary vocabulary, SubwordVocabulary::FromSerialized(bytes, path));
  return SentencePieceFile{std::move(vocabulary), SentencePieceDigest(bytes)};
}

// Whether corpus file `name` of `dir`, of `vocab_size` ids and recording `digest` (its header's),
// holds ids of `spm`: ids of another SentencePiece model would train, silently, on the wrong
// pieces, and the model would record the wrong model's digest. A version 1 file records no
// digest and is checked by its vocabulary size only.
Status CorpusFileMatches(const std::filesystem::path& dir, const std::string& name, int32_t vocab_size,
                         const std::string& digest, const SentencePieceFile& spm) {
  const std::string hint = " (files of different `psformer prepare` runs?)";
  if (vocab_size != spm.vocabulary.size()) {
    return Status::InvalidArgument(Where(dir) + ": " + name + " was encoded with " + std::to_string(vocab_size) +
                                   " pieces but spm.model has " + std::to_string(spm.vocabulary.size()) + hint);
  }
  if (!digest.empty() && digest != spm.digest) {
    return Status::InvalidArgument(Where(dir) + ": " + (dir / name).string() +
                                   " was encoded with another SentencePiece model than " +
                                   (dir / "spm.model").string() + hint + ": " + name + " records SHA-256 " +
                                   digest.substr(0, 12) + "..., spm.model is " + spm.digest.substr(0, 12) +
                                   "...; use the spm.model prepared with it, or prepare the corpus again");
  }
  return Status::Ok();
}

// The training fields that ask for a validation set, as "training.valid_every = 300": validation
// every valid_every steps, or (valid_every 0) of the final weights for the BLEU or the early
// stopping they ask. Empty when training validates nothing, which a corpus without valid.bin
// allows.
std::vector<std::pair<std::string, std::string>> FieldsAskingForValidation(const proto::TrainingConfig& t) {
  std::vector<std::pair<std::string, std::string>> fields;
  auto add = [&fields](const char* name, auto value) {
    std::ostringstream text;  // 0.5, not std::to_string's 0.500000
    text << value;
    if (value > 0) fields.emplace_back(std::string("training.") + name, text.str());
  };
  add("valid_every", t.valid_every());
  add("valid_bleu_sentences", t.valid_bleu_sentences());
  add("stop_at_valid_accuracy", t.stop_at_valid_accuracy());
  add("stop_at_valid_bleu", t.stop_at_valid_bleu());
  return fields;
}

// OK unless `config` asks for validation (FieldsAskingForValidation) and `dir` has no validation
// pairs: `valid_pairs` in its valid.bin, nullopt without one. Validating on nothing would report
// zeros as if measured (or fail in the worker, validation BLEU), so the job is refused, naming
// the file and both ways out.
Status ValidationSetPresent(const proto::JobConfig& config, const std::filesystem::path& dir,
                            std::optional<int64_t> valid_pairs) {
  if (valid_pairs && *valid_pairs > 0) return Status::Ok();
  const auto fields = FieldsAskingForValidation(config.training());
  if (fields.empty()) return Status::Ok();
  std::string asks, unset;
  for (const auto& [name, value] : fields) {
    if (!asks.empty()) asks += " and ";
    asks += name + " = " + value;
    if (!unset.empty()) unset += ' ';
    unset += "--set " + name + "=0";
  }
  const std::string valid = (dir / "valid.bin").string();
  const std::string missing = valid_pairs ? valid + " holds no pairs (prepare dropped every validation pair?)"
                                          : "there is no " + valid + " (prepared without --valid-src/--valid-tgt?)";
  return Status::InvalidArgument(Where(dir) + ": " + asks + (fields.size() == 1 ? " asks" : " ask") +
                                 " for validation, but " + missing +
                                 ": prepare the corpus again with --valid-src and --valid-tgt, or train without "
                                 "validation: " +
                                 unset);
}

// data.task = CORPUS: the directory `psformer prepare` wrote.
StatusOr<std::unique_ptr<BatchSource>> MakeCorpusSource(const proto::JobConfig& config) {
  const std::filesystem::path dir = config.data().train_dir();
  const std::string where = Where(dir);
  auto spm = ReadSentencePiece(dir);
  if (!spm.ok()) return spm.status().WithContext(where);
  const int pieces = spm->vocabulary.size();
  auto train = CorpusFile::Open((dir / "train.bin").string());
  if (!train.ok()) return train.status().WithContext(where);
  PSF_RETURN_IF_ERROR(CorpusFileMatches(dir, "train.bin", (*train)->vocab_size(), (*train)->spm_digest(), *spm));
  // Without valid.bin the source has no validation batches, and the workers validate nothing
  // (CheckPreparedCorpus refuses a job that asks them to).
  std::unique_ptr<ParallelCorpus> valid;
  std::error_code ec;
  if (std::filesystem::exists(dir / "valid.bin", ec)) {
    auto file = CorpusFile::Open((dir / "valid.bin").string());
    if (!file.ok()) return file.status().WithContext(where);
    PSF_RETURN_IF_ERROR(CorpusFileMatches(dir, "valid.bin", (*file)->vocab_size(), (*file)->spm_digest(), *spm));
    valid = std::move(file).value();
  }
  PSF_RETURN_IF_ERROR(VocabularyMatches(config, pieces));
  for (const ParallelCorpus* corpus : std::initializer_list<const ParallelCorpus*>{train->get(), valid.get()}) {
    if (corpus == nullptr) continue;
    const int32_t longest = LongestRow(*corpus);
    if (longest > config.model().max_positions()) {
      return Status::InvalidArgument(where + ": a sentence of " + std::to_string(longest) +
                                     " tokens (with eos) exceeds model.max_positions (" +
                                     std::to_string(config.model().max_positions()) +
                                     "); prepare with a smaller --max-length or raise model.max_positions");
    }
  }
  auto source =
      SampledBatchSource::Create(std::move(train).value(), std::move(valid), SamplerOptionsFromConfig(config), pieces);
  if (!source.ok()) return source.status().WithContext(where);
  return std::unique_ptr<BatchSource>(std::move(source).value());
}

}  // namespace

Status CheckPreparedCorpus(const proto::JobConfig& config) {
  if (config.data().task() != proto::DataConfig::CORPUS ||
      config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    return Status::Ok();
  }
  const std::filesystem::path dir = config.data().train_dir();
  auto spm = ReadSentencePiece(dir);
  if (!spm.ok()) return spm.status().WithContext(Where(dir));
  PSF_RETURN_IF_ERROR(VocabularyMatches(config, spm->vocabulary.size()));
  // The headers only: the workers check the data behind them as they open the files.
  auto train = ReadCorpusFileHeader((dir / "train.bin").string());
  if (!train.ok()) return train.status().WithContext(Where(dir));
  PSF_RETURN_IF_ERROR(CorpusFileMatches(dir, "train.bin", train->vocab_size, train->spm_digest, *spm));
  std::optional<int64_t> valid_pairs;
  std::error_code ec;
  if (std::filesystem::exists(dir / "valid.bin", ec)) {
    auto valid = ReadCorpusFileHeader((dir / "valid.bin").string());
    if (!valid.ok()) return valid.status().WithContext(Where(dir));
    PSF_RETURN_IF_ERROR(CorpusFileMatches(dir, "valid.bin", valid->vocab_size, valid->spm_digest, *spm));
    valid_pairs = valid->pairs;
  }
  return ValidationSetPresent(config, dir, valid_pairs);
}

StatusOr<std::string> DescribePreparedCorpus(const proto::JobConfig& config) {
  if (config.data().task() != proto::DataConfig::CORPUS ||
      config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    return std::string();
  }
  const std::filesystem::path dir = config.data().train_dir();
  std::string described;
  for (const char* name : {"train.bin", "valid.bin"}) {
    auto header = ReadCorpusFileHeader((dir / name).string());
    if (header.status().IsNotFound() && std::string(name) == "valid.bin") continue;
    if (!header.ok()) return header.status().WithContext(Where(dir));
    char crc[9];
    std::snprintf(crc, sizeof(crc), "%08x", header->body_crc);
    described += std::string(described.empty() ? "" : "; ") + name + ": " + std::to_string(header->pairs) + " pairs, " +
                 std::to_string(header->src_tokens) + " + " + std::to_string(header->tgt_tokens) +
                 " tokens, data CRC-32C " + crc;
  }
  return described;
}

StatusOr<std::unique_ptr<BatchSource>> MakeBatchSource(const proto::JobConfig& config) {
  const SamplerOptions options = SamplerOptionsFromConfig(config);
  const uint64_t seed = config.training().seed();
  if (config.data().task() == proto::DataConfig::COPY) {
    auto train = std::make_unique<InMemoryCorpus>(
        MakeCopyCorpus(seed, CopySplit::kTrain, CopyTaskOptionsFromConfig(config.data(), CopySplit::kTrain)));
    auto valid = std::make_unique<InMemoryCorpus>(
        MakeCopyCorpus(seed, CopySplit::kValid, CopyTaskOptionsFromConfig(config.data(), CopySplit::kValid)));
    auto source =
        SampledBatchSource::Create(std::move(train), std::move(valid), options, config.data().copy_vocab_size());
    if (!source.ok()) return source.status().WithContext("copy task");
    return std::unique_ptr<BatchSource>(std::move(source).value());
  }
  return MakeCorpusSource(config);
}

}  // namespace psformer
