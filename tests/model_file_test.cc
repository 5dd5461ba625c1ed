// SHA-256 on the FIPS 180-2 vectors; model files, trainer states and metrics lines: round trips
// and clear errors for truncated, corrupt or foreign files.
#include "common/model_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/binary_codec.h"
#include "common/metrics_log.h"
#include "common/param_init.h"
#include "common/param_layout.h"
#include "common/sha256.h"
#include "tests/model_test_util.h"
#include "tests/test_util.h"
#include "worker/train/trainer_state.h"

namespace psformer {
namespace {

TEST(Sha256, Fips180_2Vectors) {
  EXPECT_EQ(Sha256Hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Sha256Hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(Sha256Hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecewiseUpdatesEqualOneUpdate) {
  const std::string text(1000, 'x');
  Sha256 h;
  for (size_t i = 0; i < text.size(); i += 37) h.Update(text.data() + i, std::min<size_t>(37, text.size() - i));
  const auto digest = h.Finish();
  EXPECT_EQ(ToHex(digest.data(), digest.size()), Sha256Hex(text.data(), text.size()));
}

ModelFile SmallModelFile() {
  ModelFile f;
  f.model = testing::SmallModel(1, 8, 16, 2, false, 0.1f);
  f.vocab_size = 11;
  ParamLayout layout(f.model, f.vocab_size);
  f.params.resize(layout.total_size());
  InitParamRange(layout, 3, 0, layout.total_size(), f.params.data());
  return f;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(ModelFile, RoundTrips) {
  testing::TempDir dir;
  const ModelFile f = SmallModelFile();
  ASSERT_TRUE(WriteModelFile(dir.File("model.bin"), f).ok());
  auto read = ReadModelFile(dir.File("model.bin"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->params, f.params);
  EXPECT_EQ(read->vocab_size, 11);
  EXPECT_EQ(read->model.d_model(), 8);
  EXPECT_FALSE(std::filesystem::exists(dir.File("model.bin.tmp")));
}

// Version 2 records the SentencePiece model's digest; a version 1 file (an older psformer's)
// still reads, with none recorded.
TEST(ModelFile, RecordsItsSentencePieceDigestAndReadsVersion1FilesWithout) {
  testing::TempDir dir;
  ModelFile f = SmallModelFile();
  f.spm_digest = SentencePieceDigest("spm bytes");
  ASSERT_TRUE(WriteModelFile(dir.File("v2.bin"), f).ok());
  auto v2 = ReadModelFile(dir.File("v2.bin"));
  ASSERT_TRUE(v2.ok()) << v2.status().message();
  EXPECT_EQ(v2->spm_digest, Sha256Hex("spm bytes", 9));
  EXPECT_EQ(v2->params, f.params);

  std::string v1;
  BinaryWriter w(StringSink(&v1), std::string_view(kModelFileMagic, sizeof(kModelFileMagic)), 1);
  w.PutString(f.model.SerializeAsString());
  w.Put(f.vocab_size);
  w.Put(static_cast<uint64_t>(f.params.size()));
  w.PutArray(f.params.data(), f.params.size());
  ASSERT_TRUE(w.Finish().ok());
  WriteAll(dir.File("v1.bin"), v1);
  auto old = ReadModelFile(dir.File("v1.bin"));
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->spm_digest, "");
  EXPECT_EQ(old->params, f.params);
  EXPECT_EQ(old->vocab_size, f.vocab_size);
}

TEST(ModelFile, ASentencePieceModelIsCheckedAgainstTheDigestTheModelRecords) {
  ModelFile f = SmallModelFile();
  f.spm_digest = SentencePieceDigest("the corpus's spm");
  std::string warning;
  EXPECT_TRUE(CheckSentencePiece(f, "m.bin", "the corpus's spm", "a/spm.model", &warning).ok());
  EXPECT_EQ(warning, "");
  const Status other = CheckSentencePiece(f, "m.bin", "another corpus's spm", "b/spm.model", &warning);
  ASSERT_TRUE(other.IsInvalidArgument()) << other.ToString();
  EXPECT_NE(other.message().find("SentencePiece model mismatch: b/spm.model"), std::string::npos) << other.message();
  EXPECT_NE(other.message().find("m.bin"), std::string::npos) << other.message();
  EXPECT_EQ(warning, "");
  f.spm_digest.clear();
  EXPECT_TRUE(CheckSentencePiece(f, "m.bin", "anything", "c/spm.model", &warning).ok());
  EXPECT_NE(warning.find("m.bin records no SentencePiece model"), std::string::npos) << warning;
}

TEST(ModelFile, RejectsMissingTruncatedCorruptAndForeignFiles) {
  testing::TempDir dir;
  const std::string path = dir.File("model.bin");
  ASSERT_TRUE(WriteModelFile(path, SmallModelFile()).ok());
  const std::string good = ReadAll(path);

  auto missing = ReadModelFile(dir.File("nope.bin"));
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);

  WriteAll(path, good.substr(0, good.size() - 10));
  auto truncated = ReadModelFile(path);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos) << truncated.status().message();

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  WriteAll(path, flipped);
  auto corrupt = ReadModelFile(path);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.status().message().find("checksum"), std::string::npos) << corrupt.status().message();

  WriteAll(path, "GIF89a not a model at all, just some bytes");
  auto foreign = ReadModelFile(path);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("magic"), std::string::npos) << foreign.status().message();

  WriteAll(path, "");
  EXPECT_EQ(ReadModelFile(path).status().message(), "model file " + path + ": it is empty, not a psformer model file");

  // psformer's other files, which lie beside models, are named for what they are.
  for (const auto& [head, says] : std::vector<std::pair<std::string, std::string>>{
           {std::string("PSFCORP\0", 8), "it is a corpus file of psformer prepare (train.bin, valid.bin), not a model"},
           {"PSFSHARD", "it is a checkpoint's shard file, not a model; psformer average"},
           {"PSFTRAIN", "it is the state of train --local (trainer_state.bin), not a model"}}) {
    WriteAll(path, head + std::string(64, '\0'));
    const auto other = ReadModelFile(path);
    ASSERT_FALSE(other.ok());
    EXPECT_NE(other.status().message().find(says), std::string::npos) << other.status().message();
  }

  auto directory = ReadModelFile(dir.File(""));
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("it is a directory, not a file"), std::string::npos)
      << directory.status().message();
}

// A file whose checksum holds but whose config no model can have (written by hand, or by a
// tool that set a header byte and the CRC) is refused on reading, naming the file and the field:
// translate aborted in a check of the model ("heads 3" of d_model 8), or failed with a
// std::vector message (max_positions 0).
TEST(ModelFile, RefusesAConfigNoModelCanHaveThoughItsChecksumHolds) {
  testing::TempDir dir;
  struct Case {
    const char* name;
    void (*change)(ModelFile*);
    const char* says;
  };
  const Case cases[] = {
      {"heads", [](ModelFile* f) { f->model.set_heads(3); }, "model.heads = 3: d_model (8) must be divisible by heads"},
      {"positions", [](ModelFile* f) { f->model.set_max_positions(0); }, "model.max_positions = 0: must be > 2"},
      {"vocab", [](ModelFile* f) { f->vocab_size = 3; }, "vocabulary size 3 is invalid"},
  };
  for (const Case& c : cases) {
    ModelFile file = SmallModelFile();
    c.change(&file);
    ParamLayout layout(file.model, file.vocab_size);
    file.params.resize(layout.total_size());
    const std::string path = dir.File(std::string(c.name) + ".bin");
    ASSERT_TRUE(WriteModelFile(path, file).ok());
    auto read = ReadModelFile(path);
    ASSERT_FALSE(read.ok()) << c.name;
    EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status().message();
    EXPECT_NE(read.status().message().find(c.says), std::string::npos) << read.status().message();
  }
}

TEST(TrainerState, RoundTripsAndRejectsCorruption) {
  testing::TempDir dir;
  TrainerState s;
  s.model = testing::SmallModel(1, 8, 16, 2, true, 0.1f);
  s.vocab_size = 11;
  s.step = 42;
  s.params = {1.f, 2.f, 3.f};
  s.adam_m = {4.f, 5.f, 6.f};
  s.adam_v = {7.f, 8.f, 9.f};
  const std::string path = dir.File("state.bin");
  ASSERT_TRUE(WriteTrainerState(path, s).ok());
  auto read = ReadTrainerState(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->step, 42);
  EXPECT_EQ(read->params, s.params);
  EXPECT_EQ(read->adam_m, s.adam_m);
  EXPECT_EQ(read->adam_v, s.adam_v);
  EXPECT_EQ(read->model.norm_position(), proto::ModelConfig::PRE_LN);
  std::string bytes = ReadAll(path);
  bytes[bytes.size() - 8] ^= 1;
  WriteAll(path, bytes);
  EXPECT_FALSE(ReadTrainerState(path).ok());
}

TEST(MetricsLine, WritesOneJsonObjectPerLine) {
  MetricsLine line;
  line.Add("step", 7).Add("loss", 2.5).Add("name", std::string("a\"b")).Add("bad", std::nan(""));
  EXPECT_EQ(line.ToJson(), "{\"step\": 7, \"loss\": 2.5, \"name\": \"a\\\"b\", \"bad\": null}");
  testing::TempDir dir;
  auto log = MetricsLog::Open(dir.File("metrics.jsonl"));
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Write(line).ok());
  ASSERT_TRUE((*log)->Write(MetricsLine().Add("step", 8)).ok());
  EXPECT_EQ(ReadAll(dir.File("metrics.jsonl")), line.ToJson() + "\n{\"step\": 8}\n");
}

TEST(MetricsLine, NumbersAreTheValuesAsWritten) {
  // Rounded to float32 on its own, this double is not the float32 of the number the line says
  // (10259.3544921875 against 10259.353515625): TensorBoard's copy must be the latter.
  MetricsLine line;
  line.Add("tokens_per_s", 10259.354014328008);
  EXPECT_EQ(line.ToJson(), "{\"tokens_per_s\": 10259.354}");
  ASSERT_EQ(line.numbers().size(), 1u);
  EXPECT_EQ(line.numbers()[0].second, 10259.354);
  EXPECT_EQ(static_cast<float>(line.numbers()[0].second), 10259.353515625f);
}

}  // namespace
}  // namespace psformer
