// The shared source/target vocabulary: a SentencePiece BPE model learnt jointly over both sides
// of a corpus, with psformer's reserved ids (pad 0, bos 1, eos 2, unk 3; batch.h).
#ifndef PSFORMER_WORKER_DATA_SUBWORD_VOCABULARY_H_
#define PSFORMER_WORKER_DATA_SUBWORD_VOCABULARY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace psformer {

struct BpeOptions {
  int vocab_size = 8000;            // pieces, the 4 reserved ids included
  double character_coverage = 1.0;  // keep every character: European scripts are small alphabets
  int threads = 2;                  // SentencePiece trainer threads
  uint64_t seed = 1;                // seeds SentencePiece's sampling of very large corpora
};

// Learns a joint BPE model over every non-empty line of every side; returns the serialized
// model (the bytes of spm.model). Fails with the reason when the corpus cannot give
// `vocab_size` pieces ("... larger than this corpus allows (at most N)") or needs more.
StatusOr<std::string> TrainJointBpe(const std::vector<const std::vector<std::string>*>& sides,
                                    const BpeOptions& options);

// A loaded model. Movable, not copyable.
class SubwordVocabulary {
 public:
  // Loads a serialized model (`name` stands for it in messages) or a model file, and checks
  // that it uses psformer's reserved ids.
  static StatusOr<SubwordVocabulary> FromSerialized(const std::string& bytes, const std::string& name);
  static StatusOr<SubwordVocabulary> FromFile(const std::string& path);

  SubwordVocabulary(SubwordVocabulary&&) noexcept;
  SubwordVocabulary& operator=(SubwordVocabulary&&) noexcept;
  ~SubwordVocabulary();

  int size() const;
  // The piece string of `id` ("<pad>", "▁the", ...). REQUIRES: 0 <= id < size().
  std::string Piece(int id) const;
  // Piece ids of `text` (no bos/eos). Fails only on a SentencePiece internal error.
  Status Encode(std::string_view text, std::vector<int>* ids) const;
  // Text of `ids`; reserved ids are skipped.
  std::string Decode(const std::vector<int>& ids) const;

 private:
  explicit SubwordVocabulary(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_SUBWORD_VOCABULARY_H_
