#include "worker/data/subword_vocabulary.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <regex>

#include "worker/data/batch.h"

namespace psformer {
namespace {

// Hands SentencePiece's trainer the lines held in memory (no temporary text file).
class LinesIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LinesIterator(const std::vector<const std::vector<std::string>*>& sides) : sides_(sides) { SkipEmpty(); }
  bool done() const override { return side_ >= sides_.size(); }
  void Next() override {
    ++line_;
    SkipEmpty();
  }
  const std::string& value() const override { return (*sides_[side_])[line_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  void SkipEmpty() {
    while (side_ < sides_.size()) {
      if (line_ >= sides_[side_]->size()) {
        ++side_;
        line_ = 0;
      } else if ((*sides_[side_])[line_].empty()) {
        ++line_;
      } else {
        return;
      }
    }
  }
  const std::vector<const std::vector<std::string>*>& sides_;
  size_t side_ = 0;
  size_t line_ = 0;
};

// SentencePiece says why it cannot build the vocabulary in its own words; say it in ours.
Status ExplainTrainingFailure(const std::string& message, int vocab_size) {
  std::smatch m;
  if (std::regex_search(message, m,
                        std::regex("Vocabulary size too high \\(\\d+\\)\\. Please set it to a value <= (\\d+)"))) {
    return Status::InvalidArgument("vocabulary size " + std::to_string(vocab_size) +
                                   " is larger than this corpus allows (at most " + m[1].str() + ")");
  }
  if (std::regex_search(message, m, std::regex("smaller than required_chars\\. (\\d+) vs (\\d+)"))) {
    return Status::InvalidArgument("vocabulary size " + std::to_string(vocab_size) + " is smaller than the " +
                                   m[2].str() + " pieces this corpus needs (its characters and the reserved ids)");
  }
  if (message.find("!sentences_.empty()") != std::string::npos) {
    // SentencePiece learns only from lines up to max_sentence_length bytes and skips the rest.
    return Status::InvalidArgument(
        "no line is short enough to learn a vocabulary from: SentencePiece skips lines "
        "longer than 4192 bytes, and every training line is longer; put one sentence "
        "a line");
  }
  return Status::Internal("SentencePiece training failed: " + message);
}

Status CheckReservedIds(const sentencepiece::SentencePieceProcessor& p, const std::string& name) {
  if (p.pad_id() != kPadId || p.bos_id() != kBosId || p.eos_id() != kEosId || p.unk_id() != kUnkId) {
    return Status::InvalidArgument(name + ": the model has pad " + std::to_string(p.pad_id()) + ", bos " +
                                   std::to_string(p.bos_id()) + ", eos " + std::to_string(p.eos_id()) + ", unk " +
                                   std::to_string(p.unk_id()) +
                                   "; psformer needs pad 0, bos 1, eos 2, unk 3 (train it with "
                                   "--pad_id=0 --bos_id=1 --eos_id=2 --unk_id=3, or let prepare learn one)");
  }
  return Status::Ok();
}

// Why `bytes` did not load as a SentencePiece model. Where its parse failed, SentencePiece names
// a line of its own source; the user needs to hear what the file is instead.
std::string WhyNotAModel(const std::string& bytes, const std::string& sentencepiece_says) {
  if (bytes.empty()) return "it is empty";  // SentencePiece: "unk is not defined"
  if (sentencepiece_says.find("ParseFromArray") == std::string::npos) return sentencepiece_says;
  // A model or corpus of psformer's own, given by mistake: their magics begin "PSF".
  if (bytes.compare(0, 3, "PSF") == 0) {
    return "it is one of psformer's own files (" + std::string(bytes.data(), std::min<size_t>(bytes.size(), 7)) +
           "...), not the spm.model psformer prepare writes";
  }
  return "its bytes do not parse as one; psformer prepare writes spm.model";
}

}  // namespace

StatusOr<std::string> TrainJointBpe(const std::vector<const std::vector<std::string>*>& sides,
                                    const BpeOptions& options) {
  LinesIterator lines(sides);
  if (lines.done()) return Status::InvalidArgument("no non-empty line to learn a vocabulary from");
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(options.seed % 0xFFFFFFFFu));
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"pad_id", std::to_string(kPadId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"unk_id", std::to_string(kUnkId)},
      {"num_threads", std::to_string(options.threads)},
      // Sample at most 2M sentences: learning merges from more changes little and costs memory.
      {"input_sentence_size", "2000000"},
      {"shuffle_input_sentence", "true"},
      {"minloglevel", "2"},  // errors only: prepare reports its own progress
  };
  std::string model;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok()) return ExplainTrainingFailure(status.ToString(), options.vocab_size);
  return model;
}

SubwordVocabulary::SubwordVocabulary(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor)
    : processor_(std::move(processor)) {}
SubwordVocabulary::SubwordVocabulary(SubwordVocabulary&&) noexcept = default;
SubwordVocabulary& SubwordVocabulary::operator=(SubwordVocabulary&&) noexcept = default;
SubwordVocabulary::~SubwordVocabulary() = default;

StatusOr<SubwordVocabulary> SubwordVocabulary::FromSerialized(const std::string& bytes, const std::string& name) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    return Status::InvalidArgument(name + ": not a SentencePiece model (" + WhyNotAModel(bytes, status.ToString()) +
                                   ")");
  }
  PSF_RETURN_IF_ERROR(CheckReservedIds(*processor, name));
  return SubwordVocabulary(std::move(processor));
}

StatusOr<SubwordVocabulary> SubwordVocabulary::FromFile(const std::string& path) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    return Status::InvalidArgument("cannot load SentencePiece model " + path + ": " + status.ToString());
  }
  PSF_RETURN_IF_ERROR(CheckReservedIds(*processor, path));
  return SubwordVocabulary(std::move(processor));
}

int SubwordVocabulary::size() const { return processor_->GetPieceSize(); }

std::string SubwordVocabulary::Piece(int id) const { return processor_->IdToPiece(id); }

Status SubwordVocabulary::Encode(std::string_view text, std::vector<int>* ids) const {
  const auto status = processor_->Encode(text, ids);
  if (!status.ok()) return Status::Internal("SentencePiece encoding failed: " + status.ToString());
  return Status::Ok();
}

std::string SubwordVocabulary::Decode(const std::vector<int>& ids) const {
  std::string text;
  processor_->Decode(ids, &text).IgnoreError();
  return text;
}

}  // namespace psformer
