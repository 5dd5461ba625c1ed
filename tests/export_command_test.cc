// `psformer export` as a user meets it, on a random model of a small SentencePiece vocabulary:
// the files of the directory, the weights' names and shapes as transformers' MarianMTModel (and,
// for a PRE_LN model, PegasusForConditionalGeneration) names them, the permutation of the model dimension, and every
// bad input refused with its reason, a non-zero exit and nothing left behind. (That transformers and CTranslate2
// compute what psformer does with an export: export_model_test.cc.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "common/model_file.h"
#include "common/param_layout.h"
#include "export/marian_tensors.h"
#include "export/safetensors_file.h"
#include "tests/decode_test_util.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using testing::RunPsformer;

// A random model of the SentencePiece model's 40 pieces, the model the tests export.
// The small model with a vocabulary of 40 whose parameter i holds the value i: where each value
// lands in the export says where it came from.
ModelFile CountingModel(bool pre_ln) {
  ModelFile model;
  model.model = testing::SmallModelConfig(pre_ln);
  model.vocab_size = 40;
  model.params.resize(ParamLayout(model.model, model.vocab_size).total_size());
  for (size_t i = 0; i < model.params.size(); ++i) model.params[i] = static_cast<float>(i);
  return model;
}

std::map<std::string, NamedTensor> TensorsByName(const ModelFile& model) {
  std::map<std::string, NamedTensor> tensors;
  for (NamedTensor& t : MarianTensors(model)) tensors[t.name] = std::move(t);
  return tensors;
}

class ExportCommandTest : public testing::SmallModelFilesTest {
 protected:
  void SetUp() override {
    SmallModelFilesTest::SetUp();
    if (HasFatalFailure()) return;
    model_ = WriteRandomModel("model.bin", 40);
  }

  testing::CommandResult Export(const std::string& model, const std::string& spm, const std::string& out) {
    return RunPsformer("export --model '" + model + "' --spm '" + spm + "' --out '" + out + "'");
  }

  // The failure contract: non-zero exit, the message names the problem, no output or temporary
  // directory left in the test's directory.
  void ExpectRefused(const testing::CommandResult& r, const std::vector<std::string>& phrases) {
    EXPECT_NE(r.exit_status, 0) << r.output;
    EXPECT_LT(r.exit_status, 128) << "killed by a signal: " << r.output;
    EXPECT_NE(r.output.find("psformer export: error: "), std::string::npos) << r.output;
    for (const auto& phrase : phrases)
      EXPECT_NE(r.output.find(phrase), std::string::npos) << phrase << "\n" << r.output;
    for (const auto& entry : fs::directory_iterator(dir_.path())) {
      const std::string name = entry.path().filename().string();
      EXPECT_TRUE(name != "hf" && name.find(".tmp") == std::string::npos) << "left behind: " << name;
    }
  }

  std::string model_;
};

TEST_F(ExportCommandTest, WritesEveryFileTransformersLoads) {
  auto r = Export(model_, spm_, dir_.File("hf"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_.File("hf"))) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json",
                                          "tokenizer_config.json", "generation_config.json"}));
  std::ifstream config(dir_.File("hf/config.json"));
  const std::string text(std::istreambuf_iterator<char>(config), {});
  for (const char* field :
       {"\"model_type\": \"marian\"", "\"d_model\": 16", "\"vocab_size\": 40", "\"decoder_start_token_id\": 1",
        "\"scale_embedding\": true", "\"activation_function\": \"relu\""}) {
    EXPECT_NE(text.find(field), std::string::npos) << field << "\n" << text;
  }
  std::ifstream vocab(dir_.File("hf/vocab.json"));
  const std::string vocab_text(std::istreambuf_iterator<char>(vocab), {});
  EXPECT_NE(vocab_text.find("\"<pad>\": 0,"), std::string::npos) << vocab_text;
  EXPECT_NE(vocab_text.find("\"</s>\": 2,"), std::string::npos) << vocab_text;
  // A second export to the same directory is refused, and the first stays as it was.
  r = Export(model_, spm_, dir_.File("hf"));
  EXPECT_NE(r.exit_status, 0);
  EXPECT_NE(r.output.find("exists and is not empty"), std::string::npos) << r.output;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.File("hf")), fs::directory_iterator()), 7);
}

TEST_F(ExportCommandTest, SafetensorsHeaderNamesMarianTensors) {
  ASSERT_EQ(Export(model_, spm_, dir_.File("hf")).exit_status, 0);
  std::ifstream in(dir_.File("hf/model.safetensors"), std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  ASSERT_EQ(header_size % 8, 0u);
  const std::string header = bytes.substr(8, header_size);
  // The last tensor ends where the file does.
  std::smatch m;
  std::string::const_iterator from = header.begin();
  uint64_t end = 0;
  static const std::regex kOffsets("\"data_offsets\":\\[(\\d+),(\\d+)\\]");
  while (std::regex_search(from, header.end(), m, kOffsets)) {
    EXPECT_EQ(std::stoull(m[1]), end);
    end = std::stoull(m[2]);
    from = m.suffix().first;
  }
  EXPECT_EQ(8 + header_size + end, bytes.size());
  for (const char* tensor : {"\"model.shared.weight\":{\"dtype\":\"F32\",\"shape\":[40,16]",
                             "\"model.encoder.layers.1.self_attn.k_proj.weight\":{\"dtype\":\"F32\",\"shape\":[16,16]",
                             "\"model.decoder.layers.0.encoder_attn.v_proj.bias\":{\"dtype\":\"F32\",\"shape\":[16]",
                             "\"model.decoder.layers.1.fc1.weight\":{\"dtype\":\"F32\",\"shape\":[24,16]",
                             "\"model.encoder.embed_positions.weight\":{\"dtype\":\"F32\",\"shape\":[32,16]",
                             "\"final_logits_bias\":{\"dtype\":\"F32\",\"shape\":[1,40]"}) {
    EXPECT_NE(header.find(tensor), std::string::npos) << tensor << "\n" << header;
  }
}

TEST(MarianTensors, PermutesTheModelDimensionAndTransposes) {
  EXPECT_EQ(ModelDimensionOrder(6), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  const ModelFile model = CountingModel(/*pre_ln=*/false);
  const ParamLayout layout(model.model, model.vocab_size);
  std::map<std::string, NamedTensor> tensors = TensorsByName(model);
  const std::vector<int> order = ModelDimensionOrder(16);
  // Embedding row 5, column j: psformer's column order[j].
  const ParamTensor& e = layout.Get("embedding");
  EXPECT_EQ(tensors["model.shared.weight"].values[5 * 16 + 9], model.params[e.offset + 5 * 16 + order[9]]);
  // k_proj (out, in) = the K block of w_qkv (in, 3d) transposed, its input rows permuted.
  const ParamTensor& qkv = layout.Get("encoder.1.self_attn.w_qkv");
  EXPECT_EQ(tensors["model.encoder.layers.1.self_attn.k_proj.weight"].values[3 * 16 + 7],
            model.params[qkv.offset + order[7] * 48 + 16 + 3]);
  // fc2 (d, f): output rows permuted, the inner dimension not.
  const ParamTensor& w2 = layout.Get("decoder.0.ffn.w2");
  EXPECT_EQ(tensors["model.decoder.layers.0.fc2.weight"].values[4 * 24 + 11],
            model.params[w2.offset + 11 * 16 + order[4]]);
  const ParamTensor& gamma = layout.Get("decoder.1.ln3.gamma");
  EXPECT_EQ(tensors["model.decoder.layers.1.final_layer_norm.weight"].values[2], model.params[gamma.offset + order[2]]);
  // Sinusoids: transformers' column j < d/2 is sin of frequency j, column d/2 + j its cos.
  const std::vector<float>& pe = tensors["model.decoder.embed_positions.weight"].values;
  EXPECT_FLOAT_EQ(pe[3 * 16 + 1], std::sin(3 / std::pow(10000.0, 2.0 / 16)));
  EXPECT_FLOAT_EQ(pe[3 * 16 + 8 + 1], std::cos(3 / std::pow(10000.0, 2.0 / 16)));
}

TEST_F(ExportCommandTest, ExportsAPreLnModelAsPegasusWithEachStacksFinalNorm) {
  const std::string pre_ln = WriteRandomModel("pre_ln.bin", 40, /*pre_ln=*/true);
  const auto r = Export(pre_ln, spm_, dir_.File("hf"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("PegasusForConditionalGeneration"), std::string::npos) << r.output;
  std::ifstream config(dir_.File("hf/config.json"));
  const std::string text(std::istreambuf_iterator<char>(config), {});
  for (const char* field : {"\"model_type\": \"pegasus\"", "\"PegasusForConditionalGeneration\"",
                            "\"scale_embedding\": true", "\"decoder_start_token_id\": 1"}) {
    EXPECT_NE(text.find(field), std::string::npos) << field << "\n" << text;
  }
  EXPECT_EQ(text.find("normalize_before"), std::string::npos) << text;

  const ModelFile model = CountingModel(/*pre_ln=*/true);
  const ParamLayout layout(model.model, model.vocab_size);
  std::map<std::string, NamedTensor> tensors = TensorsByName(model);
  // Every parameter goes somewhere: the export holds each one once, plus the position tables
  // and final_logits_bias that psformer does not store.
  int64_t exported = 0;
  for (const auto& [name, t] : tensors) {
    if (name.find("embed_positions") == std::string::npos && name != "final_logits_bias") {
      exported += static_cast<int64_t>(t.values.size());
    }
  }
  EXPECT_EQ(exported, static_cast<int64_t>(layout.total_size()));
  const std::vector<int> order = ModelDimensionOrder(16);
  const ParamTensor& gamma = layout.Get("decoder.final_ln.gamma");
  ASSERT_EQ(tensors["model.decoder.layer_norm.weight"].values.size(), 16u);
  EXPECT_EQ(tensors["model.decoder.layer_norm.weight"].values[5], model.params[gamma.offset + order[5]]);
  const ParamTensor& beta = layout.Get("encoder.final_ln.beta");
  EXPECT_EQ(tensors["model.encoder.layer_norm.bias"].values[3], model.params[beta.offset + order[3]]);
}

TEST_F(ExportCommandTest, APostLnModelHasNoFinalNorms) {
  ModelFile model;
  model.model = testing::SmallModelConfig(/*pre_ln=*/false);
  model.vocab_size = 40;
  model.params.resize(ParamLayout(model.model, model.vocab_size).total_size());
  for (const NamedTensor& t : MarianTensors(model)) {
    EXPECT_TRUE(t.name != "model.encoder.layer_norm.weight" && t.name != "model.decoder.layer_norm.weight") << t.name;
  }
}

TEST_F(ExportCommandTest, RefusesATruncatedModel) {
  std::ifstream in(model_, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  dir_.Write("cut.bin", bytes.substr(0, bytes.size() / 2));
  ExpectRefused(Export(dir_.File("cut.bin"), spm_, dir_.File("hf")), {"cut.bin", "truncated"});
}

TEST_F(ExportCommandTest, RefusesAModelWhoseShapesAreNotItsConfigs) {
  // A well-formed file (right CRC) with a parameter too few for its config.
  ModelFile file;
  file.model = testing::SmallModelConfig(false);
  file.vocab_size = 40;
  const uint64_t count = ParamLayout(file.model, 40).total_size() - 1;
  std::string bytes(kModelFileMagic, sizeof(kModelFileMagic));
  const std::string config = file.model.SerializeAsString();
  const auto append = [&bytes](const auto& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  append(kModelFileVersion);
  append(static_cast<uint32_t>(config.size()));
  bytes += config;
  append(file.vocab_size);
  append(count);
  bytes.append(count * sizeof(float), '\0');
  append(Crc32c(0, bytes.data(), bytes.size()));
  dir_.Write("short.bin", bytes);
  ExpectRefused(Export(dir_.File("short.bin"), spm_, dir_.File("hf")), {"short.bin", "parameters"});
}

TEST_F(ExportCommandTest, RefusesAVocabularyOfAnotherSize) {
  ModelFile file;
  file.model = testing::SmallModelConfig(false);
  file.vocab_size = 50;
  file.params = testing::RandomParams<float>(ParamLayout(file.model, 50), 3);
  ASSERT_TRUE(WriteModelFile(dir_.File("v50.bin"), file).ok());
  ExpectRefused(Export(dir_.File("v50.bin"), spm_, dir_.File("hf")), {"vocabulary mismatch", "50"});
}

// Another corpus's SentencePiece model of the model's size would export a tokenizer that maps
// every piece to another id: refused. A model that records none (an older psformer's) exports
// with a warning.
TEST_F(ExportCommandTest, RefusesAnotherSentencePieceModelAndWarnsWhereTheModelRecordsNone) {
  const std::string foreign = WriteRandomModel("foreign.bin", 40, false, SentencePieceDigest("another spm.model"));
  ExpectRefused(Export(foreign, spm_, dir_.File("hf")), {"SentencePiece model mismatch", spm_, "foreign.bin"});
  ExpectRefused(Export(model_, dir_.File(""), dir_.File("hf")), {"it is a directory, not a file"});
  const std::string old = WriteRandomModel("old.bin", 40, false, "");
  const auto r = Export(old, spm_, dir_.File("hf"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("psformer export: warning: " + old + " records no SentencePiece model"), std::string::npos)
      << r.output;
}

// --out that is a symbolic link, even to an empty directory, cannot be renamed onto: refused
// before anything is written, naming the link (it used to fail at the end: "Not a directory").
TEST_F(ExportCommandTest, RefusesASymbolicLinkAsOut) {
  fs::create_directories(dir_.File("empty"));
  fs::create_directory_symlink(dir_.File("empty"), dir_.File("link"));
  const auto r = Export(model_, spm_, dir_.File("link"));
  EXPECT_TRUE(
      testing::EndsSaying(r, 1, "--out " + dir_.File("link") + " is a symbolic link (to " + dir_.File("empty")));
  EXPECT_TRUE(fs::is_empty(dir_.File("empty")));
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

// --out that is a mount point (a tmpfs mounted in a mount namespace of the test's own) cannot be
// renamed onto either: refused before anything is written (A14-21: everything was written, then
// "cannot rename .mntexp.tmp-PID to mntexp: Device or resource busy").
TEST_F(ExportCommandTest, RefusesAMountPointAsOut) {
  if (testing::RunShell("unshare --mount true").exit_status != 0) {
    GTEST_SKIP() << "cannot make a mount namespace here (needs root)";
  }
  const std::string mount = dir_.File("mnt");
  fs::create_directories(mount);
  const auto r = testing::RunShell("unshare --mount sh -c \"mount -t tmpfs none '" + mount + "' && cd '" +
                                   testing::SourceDir() + "' && '" + testing::PsformerBinary() + "' export --model '" +
                                   model_ + "' --spm '" + spm_ + "' --out '" + mount + "'\"");
  EXPECT_TRUE(testing::EndsSaying(r, 1, "--out " + mount + " is a mount point"));
  EXPECT_TRUE(fs::is_empty(mount));
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(ExportCommandTest, RefusesAMissingSentencePieceModel) {
  // Under a directory that does not exist yet: not even that is made.
  ExpectRefused(Export(model_, dir_.File("no.spm"), dir_.File("new/hf")), {"--spm", "no.spm"});
  EXPECT_FALSE(fs::exists(dir_.File("new")));
  ExpectRefused(Export(model_, spm_, ""), {"--out is empty"});
}

// Without --spm, a model in a run directory exports with the spm.model of the run's corpus (as
// translate does: tests/translate_command_test.cc); a model outside one is refused, asking for it.
TEST_F(ExportCommandTest, WithoutSpmTheRunsCorpusGivesIt) {
  fs::create_directories(dir_.File("run"));
  fs::copy_file(model_, dir_.File("run/model.bin"));
  std::ofstream(dir_.File("run/config.pbtxt"))
      << "name: \"t\"\ndata { task: CORPUS train_dir: \"" << dir_.path().string() << "\" }\n";
  auto r = RunPsformer("export --model '" + dir_.File("run/model.bin") + "' --out '" + dir_.File("run/hf") + "'");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("psformer export: --spm " + spm_ + " (the corpus of the model's run)"), std::string::npos)
      << r.output;
  std::ifstream given(spm_, std::ios::binary), written(dir_.File("run/hf/source.spm"), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(written), {}),
            std::string(std::istreambuf_iterator<char>(given), {}));
  r = RunPsformer("export --model '" + model_ + "' --out '" + dir_.File("hf") + "'");
  ExpectRefused(r, {"no --spm, and " + model_ + " is not in a run directory", "give --spm SPM"});
}

// The model given for --spm (two files of the same run, swapped), an empty file and a text file
// are each named for what they are, not with SentencePiece's line of source.
TEST_F(ExportCommandTest, RefusesWhatIsNotASentencePieceModelSayingWhatItIs) {
  const std::string empty = dir_.Write("empty.spm", "");
  const std::string text = dir_.Write("text.spm", "alpha beta\n");
  for (const auto& [spm, says] : std::vector<std::pair<std::string, std::string>>{
           {model_, "not a SentencePiece model (it is one of psformer's own files (PSFMODE...), not the spm.model"},
           {empty, "not a SentencePiece model (it is empty)"},
           {text, "not a SentencePiece model (its bytes do not parse as one; psformer prepare writes spm.model)"}}) {
    const auto r = Export(model_, spm, dir_.File("hf"));
    ExpectRefused(r, {spm, says});
    EXPECT_EQ(r.output.find("sentencepiece_processor.cc"), std::string::npos) << r.output;
  }
}

TEST_F(ExportCommandTest, RefusesAnUnwritableDirectory) {
  // Under a regular file: no directory can be made there, even by root.
  dir_.Write("file", "x");
  const auto r = Export(model_, spm_, dir_.File("file/hf"));
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("file/hf"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_.File("file/hf")));
}

TEST_F(ExportCommandTest, RefusesANonEmptyDirectoryAndAnUnknownFormat) {
  fs::create_directories(dir_.File("mine"));
  dir_.Write("mine/notes.txt", "keep me");
  auto r = Export(model_, spm_, dir_.File("mine"));
  EXPECT_NE(r.exit_status, 0);
  EXPECT_NE(r.output.find("exists and is not empty"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_.File("mine/notes.txt")));
  r = RunPsformer("export --model " + model_ + " --spm " + spm_ + " --out " + dir_.File("hf") + " --format onnx");
  EXPECT_EQ(r.exit_status, 2) << r.output;
  EXPECT_NE(r.output.find("--format onnx"), std::string::npos) << r.output;
}

// scripts/ctranslate2-from-export.py says what is wrong with its command line or its input, and
// which packages it lacks, before it imports them: no Python traceback (it printed one,
// ModuleNotFoundError, for every call on a machine without ctranslate2).
TEST(CTranslate2Converter, SaysWhatIsWrongBeforeItNeedsItsPackages) {
  testing::TempDir dir;
  const std::string script = "python3 " + testing::SourceDir() + "/scripts/ctranslate2-from-export.py";
  auto r = testing::RunShell(script);
  EXPECT_EQ(r.exit_status, 2) << r.output;
  EXPECT_NE(r.output.find("the following arguments are required: export_dir, out_dir"), std::string::npos) << r.output;
  r = testing::RunShell(script + " " + dir.File("none") + " " + dir.File("ct2"));
  EXPECT_TRUE(testing::EndsSaying(r, 1, dir.File("none") + " has no config.json: not a directory written by psformer"));
  fs::create_directories(dir.File("hf"));
  for (const char* name : {"config.json", "model.safetensors", "vocab.json", "tokenizer_config.json"}) {
    dir.Write(std::string("hf/") + name, "{}");
  }
  r = testing::RunShell(script + " " + dir.File("hf") + " " + dir.File("hf"));
  EXPECT_TRUE(testing::EndsSaying(r, 1, dir.File("hf") + " exists; choose a new directory"));
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
  if (testing::RunShell("python3 -c 'import numpy, ctranslate2, safetensors'").exit_status == 0) return;
  r = testing::RunShell(script + " " + dir.File("hf") + " " + dir.File("ct2"));
  EXPECT_TRUE(testing::EndsSaying(r, 1, "this script needs the Python packages numpy, ctranslate2, safetensors"));
  EXPECT_NE(r.output.find("python3 -m pip install numpy ctranslate2 safetensors"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace psformer
