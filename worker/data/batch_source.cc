#include "worker/data/batch_source.h"

#include <algorithm>
#include <filesystem>
#include <string>

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

// model.vocab_size, where set, is the corpus's `pieces` (CheckVocabularyMatchesData).
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

// data.task = CORPUS: the directory `psformer prepare` wrote.
StatusOr<std::unique_ptr<BatchSource>> MakeCorpusSource(const proto::JobConfig& config) {
  const std::filesystem::path dir = config.data().train_dir();
  const std::string where = "data.train_dir = \"" + dir.string() + "\"";
  auto vocabulary = SubwordVocabulary::FromFile((dir / "spm.model").string());
  if (!vocabulary.ok()) return vocabulary.status().WithContext(where);
  auto train = CorpusFile::Open((dir / "train.bin").string());
  if (!train.ok()) return train.status().WithContext(where);
  if ((*train)->vocab_size() != vocabulary->size()) {
    return Status::InvalidArgument(where + ": train.bin was encoded with " + std::to_string((*train)->vocab_size()) +
                                   " pieces but spm.model has " + std::to_string(vocabulary->size()) +
                                   " (files of different `psformer prepare` runs?)");
  }
  std::unique_ptr<ParallelCorpus> valid;
  std::error_code ec;
  if (std::filesystem::exists(dir / "valid.bin", ec)) {
    auto file = CorpusFile::Open((dir / "valid.bin").string());
    if (!file.ok()) return file.status().WithContext(where);
    if ((*file)->vocab_size() != vocabulary->size()) {
      return Status::InvalidArgument(where + ": valid.bin and spm.model disagree on the vocabulary size");
    }
    valid = std::move(file).value();
  }
  PSF_RETURN_IF_ERROR(VocabularyMatches(config, vocabulary->size()));
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
  auto source = SampledBatchSource::Create(std::move(train).value(), std::move(valid), SamplerOptionsFromConfig(config),
                                           vocabulary->size());
  if (!source.ok()) return source.status().WithContext(where);
  return std::unique_ptr<BatchSource>(std::move(source).value());
}

}  // namespace

Status CheckVocabularyMatchesData(const proto::JobConfig& config) {
  if (config.data().task() != proto::DataConfig::CORPUS || config.model().vocab_size() == 0 ||
      config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    return Status::Ok();
  }
  const std::filesystem::path spm = std::filesystem::path(config.data().train_dir()) / "spm.model";
  auto vocabulary = SubwordVocabulary::FromFile(spm.string());
  if (!vocabulary.ok())
    return vocabulary.status().WithContext("data.train_dir = \"" + config.data().train_dir() + "\"");
  return VocabularyMatches(config, vocabulary->size());
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
