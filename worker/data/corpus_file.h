// The binary corpus format `psformer prepare` writes and workers memory-map (train.bin,
// valid.bin). Little-endian; every count and offset is checked on opening, so a truncated or
// damaged file is reported, never read out of bounds.
//
//   offset 0, 128 bytes: header
//     char     magic[8]      "PSFCORP" and a NUL
//     uint32   version       kCorpusFileVersion (2)
//     uint32   token_bytes   2 (uint16 ids, vocabularies up to 65,536) or 4 (int32 ids)
//     uint64   pairs         P
//     uint64   src_tokens    total source tokens (no bos/eos stored)
//     uint64   tgt_tokens    total target tokens
//     uint32   vocab_size    every stored id is < vocab_size
//     uint32   body_crc      CRC-32C of every byte after the header
//     uint32   header_crc    CRC-32C of bytes 0..47 of the header, continued over bytes 64..127
//     zero padding to 64 bytes
//     char     spm_digest[64]  SentencePieceDigest (common/model_file.h) of the spm.model the
//                              ids were encoded with: 64 lower-case hex digits
//   uint64 src_offsets[P + 1]   pair i's source is src ids [src_offsets[i], src_offsets[i+1])
//   uint64 tgt_offsets[P + 1]
//   src ids [src_tokens], then tgt ids [tgt_tokens], each token_bytes wide
//
// The offsets come first so that they stay 8-byte aligned whatever the token width.
//
// Version 1 (psformer before the digest; such corpora are still shipped, so they are still
// read) is the same without spm_digest: a 64-byte header whose CRC covers bytes 0..47 only. It
// records no SentencePiece model, so a version 1 file can be checked against one by vocabulary
// size only. The digest is what lets a job refuse a train.bin and an spm.model of two different
// `prepare` runs that happen to have the same size, which would train on the wrong pieces.
#ifndef PSFORMER_WORKER_DATA_CORPUS_FILE_H_
#define PSFORMER_WORKER_DATA_CORPUS_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "worker/data/parallel_corpus.h"

namespace psformer {

constexpr uint32_t kCorpusFileVersion = 2;       // what WriteCorpusFile writes
constexpr uint32_t kCorpusFileFirstVersion = 1;  // the oldest this build still reads
constexpr size_t kCorpusHeaderBytes = 128;
constexpr size_t kCorpusHeaderBytesVersion1 = 64;

// Writes `corpus` to `path` (replacing it) in the format above, ids 2 bytes wide when
// vocab_size <= 65,536, recording `spm_digest` as the SentencePiece model the ids are of. Fails
// on I/O errors, naming the path. REQUIRES: every id < vocab_size; spm_digest is a
// SentencePieceDigest (64 lower-case hex digits).
Status WriteCorpusFile(const std::string& path, const ParallelCorpus& corpus, int32_t vocab_size,
                       std::string_view spm_digest);

// What a corpus file's header says, read without mapping or checking its data.
struct CorpusFileHeader {
  uint32_t version = 0;
  int64_t pairs = 0;
  int64_t src_tokens = 0;
  int64_t tgt_tokens = 0;
  int32_t vocab_size = 0;
  uint32_t body_crc = 0;   // CRC-32C of the data behind the header, as recorded (not checked here)
  std::string spm_digest;  // "" in a version 1 file, which records none
};

// Reads `path`'s header and checks it as Open does (magic, version, header checksum, token
// width, vocabulary size, a file size that matches the counts), but not the data behind it: a
// cheap look at a large corpus before a job starts, whose workers Open it in full. Each failure
// says what and names the file; NotFound when there is no file.
StatusOr<CorpusFileHeader> ReadCorpusFileHeader(const std::string& path);

// A corpus file, memory-mapped read-only for the object's lifetime.
class CorpusFile : public ParallelCorpus {
 public:
  // Maps and checks `path` (either version): magic, version, token width, that the size
  // matches the counts, both checksums, that offsets start at 0, never decrease and end at the
  // counts, and that every id is below vocab_size. Each failure says what and names the file.
  static StatusOr<std::unique_ptr<CorpusFile>> Open(const std::string& path);

  // An empty corpus that maps nothing; Open makes real ones.
  CorpusFile() = default;
  ~CorpusFile() override;
  CorpusFile(const CorpusFile&) = delete;
  CorpusFile& operator=(const CorpusFile&) = delete;

  int64_t size() const override { return pairs_; }
  int32_t src_length(int64_t pair) const override;
  int32_t tgt_length(int64_t pair) const override;
  void CopySrc(int64_t pair, int32_t* out) const override;
  void CopyTgt(int64_t pair, int32_t* out) const override;

  int32_t vocab_size() const { return vocab_size_; }
  // The SentencePieceDigest of the model the ids were encoded with; "" for a version 1 file.
  const std::string& spm_digest() const { return spm_digest_; }
  int64_t src_tokens() const { return static_cast<int64_t>(src_offsets_[pairs_]); }
  int64_t tgt_tokens() const { return static_cast<int64_t>(tgt_offsets_[pairs_]); }

 private:
  // What is wrong with the offsets and ids once mapped (the header counts these tokens), or "".
  std::string ContentProblem(uint64_t src_tokens, uint64_t tgt_tokens) const;

  void CopyIds(uint64_t begin, uint64_t end, const unsigned char* ids, int32_t* out) const;

  void* mapping_ = nullptr;  // the whole file
  size_t mapping_bytes_ = 0;
  int64_t pairs_ = 0;
  int32_t vocab_size_ = 0;
  std::string spm_digest_;
  uint32_t token_bytes_ = 0;
  const uint64_t* src_offsets_ = nullptr;   // (pairs + 1), inside the mapping
  const uint64_t* tgt_offsets_ = nullptr;   // (pairs + 1)
  const unsigned char* src_ids_ = nullptr;  // (src_tokens * token_bytes)
  const unsigned char* tgt_ids_ = nullptr;  // (tgt_tokens * token_bytes)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_CORPUS_FILE_H_
