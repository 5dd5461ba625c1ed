// The binary corpus format: round trips at both token widths, the SentencePiece digest it
// records, files of the older format without one still read, and every kind of damage reported
// with what is wrong and the file's name.
#include "worker/data/corpus_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "common/crc32c.h"
#include "common/model_file.h"
#include "tests/corpus_test_util.h"
#include "tests/test_util.h"
#include "worker/data/in_memory_corpus.h"

namespace psformer {
namespace {

using testing::TempDir;

// The digest of the SentencePiece model the test corpora's ids stand for.
const std::string kDigest = SentencePieceDigest("the spm.model");

InMemoryCorpus SmallCorpus(int32_t largest_id) {
  InMemoryCorpus corpus;
  corpus.Add(std::vector<int32_t>{4, 5, largest_id}, std::vector<int32_t>{6});
  corpus.Add(std::vector<int32_t>{7}, std::vector<int32_t>{8, 9});
  corpus.Add(std::vector<int32_t>{10, 11}, std::vector<int32_t>{largest_id, 12, 13, 14});
  return corpus;
}

std::vector<int32_t> Side(const ParallelCorpus& c, int64_t i, bool source) {
  std::vector<int32_t> v(source ? c.src_length(i) : c.tgt_length(i));
  if (source)
    c.CopySrc(i, v.data());
  else
    c.CopyTgt(i, v.data());
  return v;
}

void ExpectSameCorpus(const ParallelCorpus& a, const ParallelCorpus& b) {
  ASSERT_EQ(a.size(), b.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(Side(a, i, true), Side(b, i, true)) << i;
    EXPECT_EQ(Side(a, i, false), Side(b, i, false)) << i;
  }
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
// Recomputes both checksums (body at byte 44, header at byte 48 over bytes 0..47 and the digest
// at 64..127) so that a test can reach the checks behind them with a deliberately inconsistent file.
void FixChecksums(std::string* bytes) {
  const uint32_t body = Crc32c(0, bytes->data() + 128, bytes->size() - 128);
  std::memcpy(bytes->data() + 44, &body, 4);
  const uint32_t header = Crc32c(Crc32c(0, bytes->data(), 48), bytes->data() + 64, 64);
  std::memcpy(bytes->data() + 48, &header, 4);
}

TEST(CorpusFile, RoundTripsWithTwoAndFourByteIds) {
  TempDir dir;
  for (int32_t vocab : {100, 70000}) {
    const InMemoryCorpus corpus = SmallCorpus(vocab - 1);
    const std::string path = dir.File(std::to_string(vocab) + "-ids.bin");
    ASSERT_TRUE(WriteCorpusFile(path, corpus, vocab, kDigest).ok());
    auto file = CorpusFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ExpectSameCorpus(**file, corpus);
    EXPECT_EQ((*file)->vocab_size(), vocab);
    EXPECT_EQ((*file)->spm_digest(), kDigest);
    EXPECT_EQ((*file)->src_tokens(), 6);
    EXPECT_EQ((*file)->tgt_tokens(), 7);
    // 128-byte header, 2 x 4 offsets of 8 bytes, 13 ids.
    EXPECT_EQ(ReadBytes(path).size(), 128u + 64u + 13u * (vocab <= 65536 ? 2u : 4u));
    auto header = ReadCorpusFileHeader(path);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->version, 2u);
    EXPECT_EQ(header->pairs, 3);
    EXPECT_EQ(header->vocab_size, vocab);
    EXPECT_EQ(header->spm_digest, kDigest);
  }
}

// Corpora prepared before the digest (version 1) are still shipped and must still train; they
// say they record no SentencePiece model, and are as strictly checked as version 2 otherwise.
TEST(CorpusFile, AVersionOneFileWithoutADigestStillOpens) {
  TempDir dir;
  const InMemoryCorpus corpus = SmallCorpus(99);
  ASSERT_TRUE(WriteCorpusFile(dir.File("new.bin"), corpus, 100, kDigest).ok());
  const std::string old = dir.File("old.bin");
  WriteBytes(old, testing::AsVersion1CorpusFile(ReadBytes(dir.File("new.bin"))));
  auto file = CorpusFile::Open(old);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ExpectSameCorpus(**file, corpus);
  EXPECT_EQ((*file)->vocab_size(), 100);
  EXPECT_EQ((*file)->spm_digest(), "");
  auto header = ReadCorpusFileHeader(old);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->version, 1u);
  EXPECT_EQ(header->pairs, 3);
  EXPECT_EQ(header->spm_digest, "");

  std::string damaged = ReadBytes(old);
  damaged[16] ^= 1;  // the pair count, under the version 1 header checksum
  WriteBytes(old, damaged);
  EXPECT_NE(CorpusFile::Open(old).status().message().find("header checksum mismatch"), std::string::npos);
  damaged = ReadBytes(dir.File("new.bin"));
  const uint32_t version = 1;  // a version 2 file that calls itself version 1 reads as damaged
  std::memcpy(damaged.data() + 8, &version, 4);
  WriteBytes(old, damaged);
  EXPECT_FALSE(CorpusFile::Open(old).ok());
}

// Writes the small corpus, lets `damage` edit its bytes, and returns the error of opening it.
template <typename Damage>
std::string OpenDamaged(const TempDir& dir, Damage damage) {
  const std::string path = dir.File("damaged.bin");
  EXPECT_TRUE(WriteCorpusFile(path, SmallCorpus(50), 100, kDigest).ok());
  std::string bytes = ReadBytes(path);
  damage(&bytes);
  WriteBytes(path, bytes);
  auto file = CorpusFile::Open(path);
  EXPECT_FALSE(file.ok());
  if (file.ok()) return "";
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  return file.status().message();
}

TEST(CorpusFile, ReportsEachKindOfDamage) {
  TempDir dir;
  auto has = [](const std::string& message, const std::string& what) {
    return message.find(what) != std::string::npos;
  };
  // Each edit of the file's bytes and what opening it must then say. `refit`: the checksums are
  // made right again after the edit, so that the check after them is what finds it.
  struct Damage {
    void (*edit)(std::string* bytes);
    bool refit;
    const char* error;
  };
  const Damage damages[] = {
      {[](std::string* b) { b->resize(20); }, false, "shorter than any corpus file header (64 bytes"},
      {[](std::string* b) { b->resize(100); }, false,
       "file of 100 bytes is shorter than the 128-byte header of version 2"},
      {[](std::string* b) { (*b)[0] = 'X'; }, false, "bad magic number"},
      {[](std::string* b) { (*b)[8] = 9; }, false, "format version 9, this build reads versions 1 to 2"},
      {[](std::string* b) { (*b)[16] = 4; }, false, "header checksum mismatch"},
      // The digest is under the header's checksum: damage there is not a mismatch of models.
      {[](std::string* b) { (*b)[64 + 5] ^= 1; }, false, "header checksum mismatch"},
      {[](std::string* b) { (*b)[64 + 5] = 'X'; }, true, "the SentencePiece digest is not 64 hex digits"},
      {[](std::string* b) { b->pop_back(); }, true, "truncated?"},
      {[](std::string* b) { (*b)[b->size() - 1] ^= 1; }, false, "data checksum mismatch"},
      // Source offsets 0, 3, 4, 6 become 0, 5, 4, 6: decreasing at pair 1.
      {[](std::string* b) { (*b)[128 + 8] = 5; }, true, "source offsets decrease or jump at pair 1"},
      // The first source id (4) becomes 100, outside a vocabulary of 100.
      {[](std::string* b) { (*b)[128 + 64] = 100; }, true,
       "token id 100 in pair 0 (source) is outside the vocabulary of 100"},
  };
  for (const Damage& d : damages) {
    const std::string error = OpenDamaged(dir, [&d](std::string* b) {
      d.edit(b);
      if (d.refit) FixChecksums(b);
    });
    EXPECT_PRED2(has, error, d.error);
  }
}

// The header alone, as a job reads it before it starts: damage to the header is found, damage to
// the data behind it is the opening's to find.
TEST(CorpusFile, ReadingTheHeaderChecksTheHeaderOnly) {
  TempDir dir;
  const std::string path = dir.File("corpus.bin");
  ASSERT_TRUE(WriteCorpusFile(path, SmallCorpus(50), 100, kDigest).ok());
  const std::string good = ReadBytes(path);
  std::string bytes = good;
  bytes[bytes.size() - 1] ^= 1;
  WriteBytes(path, bytes);
  EXPECT_TRUE(ReadCorpusFileHeader(path).ok());
  EXPECT_NE(CorpusFile::Open(path).status().message().find("data checksum mismatch"), std::string::npos);
  for (auto edit : {+[](std::string* b) { (*b)[16] = 4; }, +[](std::string* b) { b->pop_back(); },
                    +[](std::string* b) { b->resize(100); }, +[](std::string* b) { b->resize(20); }}) {
    bytes = good;
    edit(&bytes);
    WriteBytes(path, bytes);
    auto header = ReadCorpusFileHeader(path);
    EXPECT_TRUE(header.status().IsCorruption()) << header.status().ToString();
    EXPECT_NE(header.status().message().find(path), std::string::npos) << header.status().message();
  }
}

TEST(CorpusFile, MissingFileIsNotFound) {
  TempDir dir;
  auto file = CorpusFile::Open(dir.File("none.bin"));
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(file.status().IsNotFound()) << file.status().ToString();
  EXPECT_NE(file.status().message().find("none.bin: no such file"), std::string::npos);
  EXPECT_TRUE(ReadCorpusFileHeader(dir.File("none.bin")).status().IsNotFound());
}

}  // namespace
}  // namespace psformer
