// The binary corpus format: round trips at both token widths, and every kind of damage
// reported with what is wrong and the file's name.
#include "worker/data/corpus_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "common/crc32c.h"
#include "tests/test_util.h"
#include "worker/data/in_memory_corpus.h"

namespace psformer {
namespace {

using testing::TempDir;

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
// Recomputes both checksums (body at byte 44, header at byte 48) so that a test can reach the
// checks behind them with a deliberately inconsistent file.
void FixChecksums(std::string* bytes) {
  const uint32_t body = Crc32c(0, bytes->data() + 64, bytes->size() - 64);
  std::memcpy(bytes->data() + 44, &body, 4);
  const uint32_t header = Crc32c(0, bytes->data(), 48);
  std::memcpy(bytes->data() + 48, &header, 4);
}

TEST(CorpusFile, RoundTripsWithTwoAndFourByteIds) {
  TempDir dir;
  for (int32_t vocab : {100, 70000}) {
    const InMemoryCorpus corpus = SmallCorpus(vocab - 1);
    const std::string path = dir.File(std::to_string(vocab) + "-ids.bin");
    ASSERT_TRUE(WriteCorpusFile(path, corpus, vocab).ok());
    auto file = CorpusFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ExpectSameCorpus(**file, corpus);
    EXPECT_EQ((*file)->vocab_size(), vocab);
    EXPECT_EQ((*file)->src_tokens(), 6);
    EXPECT_EQ((*file)->tgt_tokens(), 7);
    // 64-byte header, 2 x 4 offsets of 8 bytes, 13 ids.
    EXPECT_EQ(ReadBytes(path).size(), 64u + 64u + 13u * (vocab <= 65536 ? 2u : 4u));
  }
}

// Writes the small corpus, lets `damage` edit its bytes, and returns the error of opening it.
template <typename Damage>
std::string OpenDamaged(const TempDir& dir, Damage damage) {
  const std::string path = dir.File("damaged.bin");
  EXPECT_TRUE(WriteCorpusFile(path, SmallCorpus(50), 100).ok());
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
      {[](std::string* b) { b->resize(20); }, false, "shorter than the 64-byte header"},
      {[](std::string* b) { (*b)[0] = 'X'; }, false, "bad magic number"},
      {[](std::string* b) { (*b)[8] = 9; }, false, "format version 9"},
      {[](std::string* b) { (*b)[16] = 4; }, false, "header checksum mismatch"},
      {[](std::string* b) { b->pop_back(); }, true, "truncated?"},
      {[](std::string* b) { (*b)[b->size() - 1] ^= 1; }, false, "data checksum mismatch"},
      // Source offsets 0, 3, 4, 6 become 0, 5, 4, 6: decreasing at pair 1.
      {[](std::string* b) { (*b)[64 + 8] = 5; }, true, "source offsets decrease or jump at pair 1"},
      // The first source id (4) becomes 100, outside a vocabulary of 100.
      {[](std::string* b) { (*b)[64 + 64] = 100; }, true,
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

TEST(CorpusFile, MissingFileIsNotFound) {
  TempDir dir;
  auto file = CorpusFile::Open(dir.File("none.bin"));
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(file.status().IsNotFound()) << file.status().ToString();
  EXPECT_NE(file.status().message().find("none.bin: no such file"), std::string::npos);
}

}  // namespace
}  // namespace psformer
