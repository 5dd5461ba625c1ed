// `psformer prepare` as a user meets it: the figures it reports, files a worker can read back,
// and every bad input refused with its reason, a non-zero exit and no output directory left; and
// what `psformer train` refuses of a prepared directory before it starts (files of two runs, a
// validation asked of a corpus without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/config_loader.h"
#include "common/model_file.h"
#include "tests/corpus_test_util.h"
#include "tests/test_util.h"
#include "worker/data/batch_source.h"
#include "worker/data/corpus_file.h"
#include "worker/data/deterministic_random.h"
#include "worker/data/in_memory_corpus.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {
namespace {

using testing::RunPsformer;
using testing::TempDir;

// A small synthetic parallel corpus: "target" words are the source words reversed, so the two
// sides share characters but not every piece.
struct TextCorpus {
  std::string src;
  std::string tgt;
};
TextCorpus MakeText(int lines, uint64_t seed) {
  static const char* kWords[] = {"the", "house",  "river", "green",   "small", "walks", "quickly", "over",
                                 "a",   "bridge", "niño",  "canción", "and",   "light", "stone",   "tree"};
  SplitMix64 random(seed);
  TextCorpus text;
  for (int i = 0; i < lines; ++i) {
    const int n = 3 + static_cast<int>(random.Below(8));
    std::string s, t;
    for (int k = 0; k < n; ++k) {
      std::string word = kWords[random.Below(16)];
      s += (k ? " " : "") + word;
      t = word + (k ? " " : "") + t;
    }
    text.src += s + "\n";
    text.tgt += t + "\n";
  }
  return text;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Runs prepare in `dir` with the given extra arguments on files already written there.
testing::CommandResult Prepare(const TempDir& dir, const std::string& arguments) {
  return RunPsformer("prepare " + arguments + " --out " + Quote(dir.File("out")));
}

// The failure contract: non-zero exit, the message, no output or temporary directory left.
void ExpectRefused(const TempDir& dir, const testing::CommandResult& r, const std::vector<std::string>& phrases) {
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_LT(r.exit_status, 128) << "killed by a signal: " << r.output;
  EXPECT_NE(r.output.find("psformer prepare: error: "), std::string::npos) << r.output;
  for (const auto& phrase : phrases) EXPECT_NE(r.output.find(phrase), std::string::npos) << phrase << "\n" << r.output;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name != "out" && name.find(".tmp-") == std::string::npos) << "left behind: " << name;
  }
}

TEST(Prepare, WritesReadableCorpusAndReportsEveryDropReason) {
  TempDir dir;
  TextCorpus text = MakeText(300, 1);
  // One pair with an empty side, one with a long side, one with a lopsided length ratio.
  std::string long_line = "the";
  for (int i = 0; i < 100; ++i) long_line += " house";
  text.src += "\n" + long_line + "\n" + "tree\n";
  text.tgt += "river\n" + long_line + "\n" + "tree green small walks quickly over the bridge\n";
  dir.Write("train.en", text.src);
  dir.Write("train.es", text.tgt);
  const TextCorpus valid = MakeText(20, 2);
  dir.Write("valid.en", valid.src);
  dir.Write("valid.es", valid.tgt);
  auto r = Prepare(dir, "--src " + Quote(dir.File("train.en")) + " --tgt " + Quote(dir.File("train.es")) +
                            " --valid-src " + Quote(dir.File("valid.en")) + " --valid-tgt " +
                            Quote(dir.File("valid.es")) + " --vocab-size 60 --max-length 90 --max-length-ratio 2.5");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("pairs read     303"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pairs kept     300"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 with an empty side, 1 with a side over 90 pieces, 1 with a length ratio over 2.5"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("vocabulary: 60 pieces"), std::string::npos) << r.output;

  // Read back as a worker does, and decode: the text comes back.
  auto vocabulary = SubwordVocabulary::FromFile(dir.File("out/spm.model"));
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status().ToString();
  EXPECT_EQ(vocabulary->size(), 60);
  auto train = CorpusFile::Open(dir.File("out/train.bin"));
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  ASSERT_EQ((*train)->size(), 300);
  std::vector<int32_t> ids((*train)->tgt_length(7));
  (*train)->CopyTgt(7, ids.data());
  std::vector<std::string> lines;
  std::istringstream tgt_lines(text.tgt);
  for (std::string line; std::getline(tgt_lines, line);) lines.push_back(line);
  EXPECT_EQ(vocabulary->Decode(std::vector<int>(ids.begin(), ids.end())), lines[7]);
  EXPECT_NE(r.output.find("tokens         source " + std::to_string((*train)->src_tokens()) + ", target " +
                          std::to_string((*train)->tgt_tokens())),
            std::string::npos)
      << r.output;
  auto valid_file = CorpusFile::Open(dir.File("out/valid.bin"));
  ASSERT_TRUE(valid_file.ok());
  EXPECT_EQ((*valid_file)->size(), 20);
  EXPECT_TRUE(std::filesystem::exists(dir.File("out/report.txt")));

  // A CORPUS job serves batches from it.
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_data()->set_task(proto::DataConfig::CORPUS);
  config.mutable_data()->set_train_dir(dir.File("out"));
  config.mutable_batching()->set_src_tokens_per_step(200);
  config.mutable_batching()->set_tgt_tokens_per_step(200);
  auto source = MakeBatchSource(config);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ((*source)->vocab_size(), 60);
  EXPECT_GT((*source)->TrainBatch(1, 0, 2).sentences, 0);
  int64_t valid_rows = 0;
  for (const Batch& b : (*source)->ValidBatches()) valid_rows += b.sentences;
  EXPECT_EQ(valid_rows, (*valid_file)->size());

  // Encoding again with the learnt model gives the same ids.
  auto again = RunPsformer("prepare --src " + Quote(dir.File("train.en")) + " --tgt " + Quote(dir.File("train.es")) +
                           " --spm " + Quote(dir.File("out/spm.model")) +
                           " --max-length 90 --max-length-ratio 2.5 --out " + Quote(dir.File("out2")));
  ASSERT_EQ(again.exit_status, 0) << again.output;
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(dir.File("out/train.bin")), bytes(dir.File("out2/train.bin")));
}

// A config whose model.vocab_size differs from its corpus's (configs/base.pbtxt names the
// paper's 37,000; this corpus has 60 pieces) is refused before anything starts, naming both and
// the fix: servers would size the embedding by the one and workers by the other, and the job
// would fail at its first pull with a range error, restarting five times. Equal or 0: served.
TEST(Prepare, ATrainWhoseVocabularySizeIsNotTheCorpusesIsRefusedUpFront) {
  TempDir dir;
  const TextCorpus text = MakeText(300, 3);
  dir.Write("train.en", text.src);
  dir.Write("train.es", text.tgt);
  ASSERT_EQ(Prepare(dir, "--src " + Quote(dir.File("train.en")) + " --tgt " + Quote(dir.File("train.es")) +
                             " --vocab-size 60")
                .exit_status,
            0);
  const std::string run = dir.File("run");
  const auto r = RunPsformer("train --config configs/base.pbtxt --set data.train_dir=" + Quote(dir.File("out")) +
                             " --set cluster.backend=CPU --run-dir " + Quote(run));
  EXPECT_EQ(r.exit_status, 1) << r.output;
  EXPECT_NE(r.output.find("psformer train: error: model.vocab_size = 37000 but " + dir.File("out/spm.model") +
                          " has 60 pieces"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("set model.vocab_size=60, or 0 to take it from the data"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "the run directory was made";

  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_data()->set_task(proto::DataConfig::CORPUS);
  config.mutable_data()->set_train_dir(dir.File("out"));
  config.mutable_training()->set_valid_every(0);  // the corpus has no valid.bin
  for (const int vocab : {61, 59}) {
    config.mutable_model()->set_vocab_size(vocab);
    EXPECT_TRUE(CheckPreparedCorpus(config).IsInvalidArgument()) << vocab;
    EXPECT_TRUE(MakeBatchSource(config).status().IsInvalidArgument()) << vocab << ": a worker refuses it too";
  }
  for (const int vocab : {60, 0}) {
    config.mutable_model()->set_vocab_size(vocab);
    EXPECT_TRUE(CheckPreparedCorpus(config).ok()) << vocab;
    auto source = MakeBatchSource(config);
    ASSERT_TRUE(source.ok()) << vocab << ": " << source.status().ToString();
    EXPECT_EQ((*source)->vocab_size(), 60);
  }
}

// The `psformer train` arguments of a short run on the prepared corpus `corpus` into `run_dir`:
// the Bible demo's config with a model small enough for a test and 6 steps. `flags` adds to it.
std::string TrainOn(const std::string& corpus, const std::string& run_dir, const std::string& flags) {
  return "train --config configs/bible.pbtxt --set data.train_dir=" + Quote(corpus) +
         " --set model.layers=1 --set model.d_model=32 --set model.d_ff=64 --set training.max_steps=6 "
         "--set logging.every_steps=2 --set batching.src_tokens_per_step=300 --set batching.tgt_tokens_per_step=300 " +
         flags + " --run-dir " + Quote(run_dir);
}

// Prepares `text` (and `valid`, when given) in DIR/NAME with a vocabulary of 60 pieces.
void PrepareInto(const TempDir& dir, const std::string& name, const TextCorpus& text,
                 const TextCorpus* valid = nullptr) {
  std::string arguments = "prepare --src " + Quote(dir.Write(name + ".en", text.src)) + " --tgt " +
                          Quote(dir.Write(name + ".es", text.tgt));
  if (valid != nullptr) {
    arguments += " --valid-src " + Quote(dir.Write(name + "-valid.en", valid->src)) + " --valid-tgt " +
                 Quote(dir.Write(name + "-valid.es", valid->tgt));
  }
  const auto r = RunPsformer(arguments + " --vocab-size 60 --out " + Quote(dir.File(name)));
  ASSERT_EQ(r.exit_status, 0) << r.output;
}

// A corpus directory made of `files`, each copied from the directory its pair names.
std::string Assemble(const TempDir& dir, const std::string& name,
                     const std::vector<std::pair<std::string, std::string>>& files) {
  std::filesystem::create_directory(dir.File(name));
  for (const auto& [from, file] : files) {
    std::filesystem::copy_file(dir.File(from + "/" + file), dir.File(name + "/" + file));
  }
  return dir.File(name);
}

proto::JobConfig CorpusConfig(const std::string& train_dir) {
  proto::JobConfig config;
  FillDefaults(&config);
  config.mutable_data()->set_task(proto::DataConfig::CORPUS);
  config.mutable_data()->set_train_dir(train_dir);
  return config;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A prepare stopped midway (SIGTERM, as a batch system sends; Ctrl-C's SIGINT goes the same way)
// removes its unfinished output, says so, and ends by that signal, so that a script running it
// stops too. Before, it left ".out.tmp-PID" with whatever it had written beside the output, and
// the directories it had made for the output.
TEST(Prepare, AStopMidwayRemovesTheUnfinishedOutputAndEndsByTheSignal) {
  TempDir dir;
  const TextCorpus text = MakeText(200000, 7);
  const std::string src = dir.Write("train.en", text.src);
  const std::string tgt = dir.Write("train.es", text.tgt);
  // Its --out in directories it makes: they go too.
  const std::string temp = dir.File("corpora/en-es/.out.tmp-");
  // Stopped as soon as its temporary directory appears (at most 30 s of waiting for it).
  const auto r =
      testing::RunShell("cd " + testing::SourceDir() + " && { " + testing::PsformerBinary() + " prepare --src " +
                        Quote(src) + " --tgt " + Quote(tgt) + " --vocab-size 60 --out " +
                        Quote(dir.File("corpora/en-es/out")) + " & pid=$!; n=0; while [ ! -d " + Quote(temp) +
                        "$pid ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done; kill -TERM $pid; "
                        "wait $pid; echo \"status $?\"; }");
  EXPECT_NE(r.output.find("status 143"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("psformer prepare: terminated; removed its unfinished files: " + temp), std::string::npos)
      << r.output;
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"train.en", "train.es"}));
}

// A train.bin (or valid.bin) and an spm.model of two `prepare` runs with vocabularies of the
// same size: the ids of the one are other pieces of the other, so training on them would learn
// the wrong subwords without a word, and model.bin would record the wrong spm.model. Refused
// before anything starts, naming both files, as the workers refuse them too.
TEST(Prepare, CorpusFilesOfAnotherPrepareRunAreRefusedUpFront) {
  TempDir dir;
  const TextCorpus valid = MakeText(20, 7);
  PrepareInto(dir, "a", MakeText(300, 5), &valid);
  PrepareInto(dir, "b", MakeText(250, 6), &valid);
  ASSERT_NE(FileBytes(dir.File("a/spm.model")), FileBytes(dir.File("b/spm.model")));

  const std::string mixed = Assemble(dir, "mixed", {{"a", "train.bin"}, {"b", "spm.model"}, {"b", "valid.bin"}});
  const std::string run = dir.File("run");
  const auto r = RunPsformer(TrainOn(mixed, run, "--set training.valid_every=3"));
  EXPECT_TRUE(testing::EndsSaying(r, 1,
                                  "psformer train: error: data.train_dir = \"" + mixed + "\": " + mixed +
                                      "/train.bin was encoded with another SentencePiece model than " + mixed +
                                      "/spm.model"));
  EXPECT_TRUE(testing::HasText(r.output, "(files of different `psformer prepare` runs?)")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "the run directory was made";
  const proto::JobConfig config = CorpusConfig(mixed);
  EXPECT_TRUE(CheckPreparedCorpus(config).IsInvalidArgument());
  const Status worker = MakeBatchSource(config).status();
  EXPECT_TRUE(worker.IsInvalidArgument()) << "a worker refuses it too";
  EXPECT_TRUE(testing::HasText(worker.message(), mixed + "/train.bin was encoded with another")) << worker.message();

  // valid.bin likewise, with vocabulary sizes or without.
  const std::string mixed_valid =
      Assemble(dir, "mixed-valid", {{"b", "train.bin"}, {"b", "spm.model"}, {"a", "valid.bin"}});
  const Status check = CheckPreparedCorpus(CorpusConfig(mixed_valid));
  EXPECT_TRUE(
      testing::HasText(check.message(), mixed_valid + "/valid.bin was encoded with another SentencePiece model"))
      << check.message();
  EXPECT_TRUE(testing::HasText(MakeBatchSource(CorpusConfig(mixed_valid)).status().message(),
                               mixed_valid + "/valid.bin was encoded with another"));
  EXPECT_TRUE(testing::EndsSaying(RunPsformer(TrainOn(mixed_valid, run, "--set training.valid_every=3")), 1,
                                  "/valid.bin was encoded with another SentencePiece model"));
}

// A damaged train.bin (a byte run overwritten, its size unchanged) is refused by train with
// and without --local, and neither leaves a run directory behind that the retry on good data
// would have to --overwrite (--local once left logs/trainer.log there).
TEST(Prepare, ADamagedCorpusIsRefusedLeavingNoRunDirectory) {
  TempDir dir;
  const TextCorpus valid = MakeText(20, 7);
  PrepareInto(dir, "a", MakeText(300, 5), &valid);
  const std::string damaged = Assemble(dir, "damaged", {{"a", "train.bin"}, {"a", "spm.model"}, {"a", "valid.bin"}});
  {
    std::fstream file(damaged + "/train.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(std::filesystem::file_size(damaged + "/train.bin") / 2));
    file.write("\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  }
  for (const std::string placement : {"--local", "--set cluster.workers=1 --set cluster.servers=1"}) {
    const std::string run = dir.File(placement == "--local" ? "local" : "servers");
    const auto r = RunPsformer(TrainOn(damaged, run, "--set training.valid_every=3 " + placement));
    EXPECT_TRUE(testing::EndsSaying(r, 1, "/train.bin: data checksum mismatch (the file is damaged)")) << placement;
    EXPECT_FALSE(std::filesystem::exists(run)) << placement << ": the run directory was made";
    ASSERT_EQ(RunPsformer(TrainOn(dir.File("a"), run, "--set training.valid_every=3 " + placement)).exit_status, 0)
        << placement;
  }
}

// The same files, each beside its own spm.model, train; model.bin records that spm.model.
TEST(Prepare, CorpusFilesOfOnePrepareRunTrain) {
  TempDir dir;
  const TextCorpus valid = MakeText(20, 7);
  PrepareInto(dir, "a", MakeText(300, 5), &valid);
  EXPECT_TRUE(CheckPreparedCorpus(CorpusConfig(dir.File("a"))).ok());
  for (const std::string placement : {"--local", "--set cluster.workers=1 --set cluster.servers=1"}) {
    const std::string run = dir.File(placement == "--local" ? "local" : "servers");
    const auto r = RunPsformer(TrainOn(dir.File("a"), run, "--set training.valid_every=3 " + placement));
    ASSERT_EQ(r.exit_status, 0) << r.output;
    auto model = ReadModelFile(run + "/model.bin");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(model->spm_digest, SentencePieceDigest(FileBytes(dir.File("a/spm.model")))) << placement;
    EXPECT_EQ(testing::MetricValues(run + "/metrics.jsonl", "valid_loss").size(), 2u) << placement;
  }
}

// Under mpirun each rank reads the corpus on its own host. A copy of the same files elsewhere
// trains; a train.bin of other sentences (encoded with the same spm.model, so nothing else would
// notice) on one rank is refused by that rank before anything is written, naming the difference.
TEST(Prepare, EveryRankUnderMpirunMustReadTheSameCorpus) {
  TempDir dir;
  const TextCorpus valid = MakeText(20, 7);
  PrepareInto(dir, "a", MakeText(300, 5), &valid);
  const std::string copy = Assemble(dir, "copy", {{"a", "train.bin"}, {"a", "spm.model"}, {"a", "valid.bin"}});
  const std::string roles = "--set cluster.workers=2 --set cluster.servers=1";
  const std::string run = dir.File("run");
  auto r = testing::RunPsformerRanksUnderMpirun(TrainOn(dir.File("a"), run, roles), {{2, TrainOn(copy, run, roles)}});
  ASSERT_EQ(r.exit_status, 0) << r.output;

  const auto other = RunPsformer("prepare --src " + Quote(dir.Write("b.en", MakeText(280, 8).src)) + " --tgt " +
                                 Quote(dir.Write("b.es", MakeText(280, 8).tgt)) + " --spm " +
                                 Quote(dir.File("a/spm.model")) + " --out " + Quote(dir.File("b")));
  ASSERT_EQ(other.exit_status, 0) << other.output;
  const std::string mixed = Assemble(dir, "mixed", {{"b", "train.bin"}, {"a", "spm.model"}, {"a", "valid.bin"}});
  const std::string refused = dir.File("refused");
  r = testing::RunPsformerRanksUnderMpirun(TrainOn(dir.File("a"), refused, roles),
                                           {{1, TrainOn(copy, refused, roles)}, {1, TrainOn(mixed, refused, roles)}});
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_TRUE(testing::HasText(r.output, "psformer train: error: rank 2 on ")) << r.output;
  EXPECT_TRUE(
      testing::HasText(r.output, "its corpus (data.train_dir = \"" + mixed + "\") is not rank 0's: here train.bin: "))
      << r.output;
  EXPECT_FALSE(testing::HasText(r.output, "error: rank 1 ")) << "rank 1's copy is rank 0's corpus:\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(refused)) << "the run directory was made";
}

// Corpora prepared before the corpus files recorded their SentencePiece model (version 1, as
// shipped by tooling) still load and train; their spm.model is checked by its size only.
TEST(Prepare, ACorpusOfTheFormatBeforeTheDigestStillTrains) {
  TempDir dir;
  const TextCorpus valid = MakeText(20, 7);
  PrepareInto(dir, "a", MakeText(300, 5), &valid);
  PrepareInto(dir, "b", MakeText(250, 6), &valid);
  for (const char* file : {"train.bin", "valid.bin"}) {
    const std::string path = dir.File(std::string("a/") + file);
    const std::string old = testing::AsVersion1CorpusFile(FileBytes(path));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << old;
    auto header = ReadCorpusFileHeader(path);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    ASSERT_EQ(header->version, 1u) << file;
  }
  EXPECT_TRUE(CheckPreparedCorpus(CorpusConfig(dir.File("a"))).ok());
  const auto r = RunPsformer(TrainOn(dir.File("a"), dir.File("run"), "--set training.valid_every=3"));
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_EQ(testing::MetricValues(dir.File("run/metrics.jsonl"), "valid_loss").size(), 2u);
  // What version 1 cannot tell: another run's spm.model of the same size.
  const std::string old_mixed = Assemble(dir, "old-mixed", {{"a", "train.bin"}, {"b", "spm.model"}});
  proto::JobConfig config = CorpusConfig(old_mixed);
  config.mutable_training()->set_valid_every(0);
  EXPECT_TRUE(CheckPreparedCorpus(config).ok());
}

// A corpus prepared without --valid-src/--valid-tgt has no valid.bin: a job that asks for
// validation of it would report valid_loss 0 at every validation as if measured, or (validation
// BLEU) end in its worker with a message that never names the file. Refused before anything
// starts, naming the file and both ways out; --dry-run warns of it (the data is the training
// machine's, docs/launching.md).
TEST(Prepare, ATrainAskingForValidationOfACorpusWithoutValidBinIsRefusedUpFront) {
  TempDir dir;
  PrepareInto(dir, "nv", MakeText(300, 5));
  const std::string nv = dir.File("nv");
  const std::string run = dir.File("run");
  const std::string missing =
      "there is no " + nv + "/valid.bin (prepared without --valid-src/--valid-tgt?): " +
      "prepare the corpus again with --valid-src and --valid-tgt, or train without validation: ";
  const auto every =
      RunPsformer(TrainOn(nv, run, "--set training.valid_every=3 --set training.valid_bleu_sentences=0"));
  EXPECT_TRUE(testing::EndsSaying(every, 1,
                                  "psformer train: error: data.train_dir = \"" + nv +
                                      "\": training.valid_every = 3 asks for validation, but " + missing +
                                      "--set training.valid_every=0\n"));
  const auto bleu = RunPsformer(TrainOn(nv, run, "--set training.valid_every=3"));  // the demo's 100 BLEU sentences
  EXPECT_TRUE(testing::EndsSaying(bleu, 1,
                                  "training.valid_every = 3 and training.valid_bleu_sentences = 100 ask for "
                                  "validation, but " +
                                      missing + "--set training.valid_every=0 --set training.valid_bleu_sentences=0"));
  const auto local = RunPsformer(TrainOn(nv, run, "--local --set training.valid_bleu_sentences=0"));
  EXPECT_TRUE(testing::EndsSaying(local, 1, "training.valid_every = 300 asks for validation"));
  EXPECT_FALSE(std::filesystem::exists(run)) << "the run directory was made";
  const auto dry = RunPsformer(TrainOn(nv, run, "--set training.valid_every=3 --dry-run"));
  EXPECT_TRUE(testing::EndsSaying(
      dry, 0, "psformer train: warning: data.train_dir = \"" + nv + "\": training.valid_every = 3"));
  EXPECT_FALSE(std::filesystem::exists(run));

  // Only the final weights validated, for their BLEU or early stopping: refused alike.
  proto::JobConfig config = CorpusConfig(nv);
  config.mutable_training()->set_valid_every(0);
  config.mutable_training()->set_stop_at_valid_accuracy(0.5f);
  EXPECT_TRUE(testing::HasText(CheckPreparedCorpus(config).message(),
                               "training.stop_at_valid_accuracy = 0.5 asks for validation, but there is no"))
      << CheckPreparedCorpus(config).message();
  // A valid.bin of no pairs (prepare dropped every validation pair) validates nothing either.
  const std::string digest = SentencePieceDigest(FileBytes(nv + "/spm.model"));
  ASSERT_TRUE(WriteCorpusFile(nv + "/valid.bin", InMemoryCorpus(), 60, digest).ok());
  EXPECT_TRUE(testing::HasText(CheckPreparedCorpus(config).message(),
                               nv + "/valid.bin holds no pairs (prepare dropped every validation pair?)"))
      << CheckPreparedCorpus(config).message();
}

// Without validation asked (training.valid_every 0, no BLEU, no early stopping) the same corpus
// trains, and no validation is reported: not even of the final weights, which valid_every 0
// validates when there is a validation set.
TEST(Prepare, ACorpusWithoutValidBinTrainsWhenNoValidationIsAsked) {
  TempDir dir;
  PrepareInto(dir, "nv", MakeText(300, 5));
  for (const std::string placement : {"--local", "--set cluster.workers=1 --set cluster.servers=1"}) {
    const std::string run = dir.File(placement == "--local" ? "local" : "servers");
    const auto r = RunPsformer(TrainOn(
        dir.File("nv"), run, "--set training.valid_every=0 --set training.valid_bleu_sentences=0 " + placement));
    ASSERT_EQ(r.exit_status, 0) << r.output;
    EXPECT_TRUE(std::filesystem::exists(run + "/model.bin")) << placement;
    EXPECT_EQ(testing::MetricValues(run + "/metrics.jsonl", "loss").size(), 3u) << placement;
    const std::string metrics = testing::ReadTextFile(run + "/metrics.jsonl");
    EXPECT_FALSE(testing::HasText(metrics, "valid_")) << placement << ": no validation, so no figures of one\n"
                                                      << metrics;
  }
}

// A run's corpus prepared again in its place (its ids then mean other pieces): the run's
// config.pbtxt records its SentencePiece model, and a resume, --local or through the servers,
// refuses another and leaves the run's config as it was; with the run's own back it continues.
TEST(Prepare, AResumeOnACorpusPreparedAgainIsRefused) {
  TempDir dir;
  PrepareInto(dir, "a", MakeText(300, 5));
  PrepareInto(dir, "b", MakeText(300, 11));
  const std::string spm_a = SentencePieceDigest(FileBytes(dir.File("a/spm.model")));
  ASSERT_NE(spm_a, SentencePieceDigest(FileBytes(dir.File("b/spm.model")))) << "the test needs two models";
  const std::string corpus = dir.File("corpus");
  const auto use = [&](const std::string& which) {
    std::filesystem::remove_all(corpus);
    std::filesystem::copy(dir.File(which), corpus);
  };
  const std::string flags = "--set training.valid_every=0 --set training.valid_bleu_sentences=0 ";
  for (const std::string placement : {"--local", "--set cluster.workers=1 --set cluster.servers=1"}) {
    SCOPED_TRACE(placement);
    const std::string run = dir.File(placement == "--local" ? "local" : "servers");
    use("a");
    auto r = RunPsformer(TrainOn(corpus, run, flags + "--set checkpoint.every_steps=3 " + placement));
    ASSERT_EQ(r.exit_status, 0) << r.output;
    const std::string config = testing::ReadTextFile(run + "/config.pbtxt");
    EXPECT_TRUE(testing::HasText(config, "spm_sha256: \"" + spm_a + "\"")) << config;
    use("b");
    const std::string resume = flags + "--set training.max_steps=9 --resume " + placement;
    r = RunPsformer(TrainOn(corpus, run, resume));
    EXPECT_TRUE(testing::EndsSaying(r, 1, corpus + "/spm.model is not the SentencePiece model the run trains with"));
    EXPECT_TRUE(testing::HasText(r.output, "ids would mean other pieces")) << r.output;
    EXPECT_EQ(testing::ReadTextFile(run + "/config.pbtxt"), config);
    use("a");
    r = RunPsformer(TrainOn(corpus, run, resume));
    EXPECT_EQ(r.exit_status, 0) << r.output;
  }
}

TEST(Prepare, ProgressOnATerminalOnly) {
  TempDir dir;
  const TextCorpus train = MakeText(300, 3);
  const TextCorpus valid = MakeText(20, 4);
  dir.Write("train.en", train.src);
  dir.Write("train.es", train.tgt);
  dir.Write("valid.en", valid.src);
  dir.Write("valid.es", valid.tgt);
  const std::string arguments = "prepare --src " + Quote(dir.File("train.en")) + " --tgt " +
                                Quote(dir.File("train.es")) + " --valid-src " + Quote(dir.File("valid.en")) +
                                " --valid-tgt " + Quote(dir.File("valid.es")) + " --vocab-size 60 --out ";
  // Each split's meter ends fully drawn, then is cleared before the report.
  const auto terminal = testing::RunPsformerInTerminal(arguments + Quote(dir.File("out1")));
  ASSERT_EQ(terminal.exit_status, 0) << terminal.output;
  EXPECT_NE(terminal.output.find("\rprepare: 300/300 training pairs (100%)"), std::string::npos) << terminal.output;
  EXPECT_NE(terminal.output.find("\rprepare: 20/20 validation pairs (100%)"), std::string::npos) << terminal.output;
  EXPECT_NE(terminal.output.find("pairs kept     300"), std::string::npos) << terminal.output;
  const auto piped = RunPsformer(arguments + Quote(dir.File("out2")));
  ASSERT_EQ(piped.exit_status, 0) << piped.output;
  EXPECT_EQ(piped.output.find("pairs ("), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\033'), std::string::npos) << piped.output;
}

class PrepareRefuses : public ::testing::Test {
 protected:
  void SetUp() override {
    const TextCorpus text = MakeText(200, 3);
    src_ = dir_.Write("a.en", text.src);
    tgt_ = dir_.Write("b.es", text.tgt);
  }
  std::string Files(const std::string& src, const std::string& tgt) {
    return "--src " + Quote(src) + " --tgt " + Quote(tgt) + " --vocab-size 50";
  }
  TempDir dir_;
  std::string src_, tgt_;
};

TEST_F(PrepareRefuses, DifferentLineCounts) {
  const std::string shorter = dir_.Write("short.es", MakeText(199, 3).tgt);
  ExpectRefused(dir_, Prepare(dir_, Files(src_, shorter)),
                {"--src " + src_ + " has 200 lines but --tgt " + shorter + " has 199"});
  // Nor the directories it made for an --out whose parents did not exist.
  ExpectRefused(dir_, RunPsformer("prepare " + Files(src_, shorter) + " --out " + Quote(dir_.File("new/deeper/out"))),
                {"has 200 lines"});
  EXPECT_FALSE(std::filesystem::exists(dir_.File("new")));
}

TEST_F(PrepareRefuses, UnreadableFile) {
  ExpectRefused(dir_, Prepare(dir_, Files(src_, dir_.File("missing.es"))),
                {"cannot read " + dir_.File("missing.es") + ": No such file or directory"});
  ExpectRefused(dir_, Prepare(dir_, Files(dir_.path().string(), tgt_)), {"is a directory"});
}

TEST_F(PrepareRefuses, InvalidUtf8WithItsLine) {
  const TextCorpus text = MakeText(200, 3);
  std::string bad = text.tgt;
  const size_t line5 = [&] {
    size_t at = 0;
    for (int i = 0; i < 4; ++i) at = bad.find('\n', at) + 1;
    return at;
  }();
  bad.insert(line5 + 2, "\xC3\x28");  // a lead byte followed by a non-continuation byte
  const std::string path = dir_.Write("bad.es", bad);
  ExpectRefused(dir_, Prepare(dir_, Files(src_, path)), {path + ":5: invalid UTF-8 at byte 3"});
}

TEST_F(PrepareRefuses, EmptyCorpus) {
  const std::string empty_src = dir_.Write("empty.en", "");
  const std::string empty_tgt = dir_.Write("empty.es", "");
  ExpectRefused(dir_, Prepare(dir_, Files(empty_src, empty_tgt)), {"are empty: no sentence pairs"});
  // Lines, but not one usable pair.
  const std::string blank_src = dir_.Write("blank.en", "\n \n\n");
  const std::string blank_tgt = dir_.Write("blank.es", "x\ny\nz\n");
  ExpectRefused(dir_, Prepare(dir_, "--src " + Quote(blank_src) + " --tgt " + Quote(blank_tgt) + " --vocab-size 8"),
                {"is left: of 3 read, 3 with an empty side"});
  // Validation pairs none of which is kept: refused rather than an empty valid.bin written.
  ExpectRefused(
      dir_, Prepare(dir_, Files(src_, tgt_) + " --valid-src " + Quote(blank_src) + " --valid-tgt " + Quote(blank_tgt)),
      {"no pair of " + blank_src + " / " + blank_tgt + " is left: of 3 read, 3 with an empty side",
       "leave out --valid-src and --valid-tgt"});
}

TEST_F(PrepareRefuses, VocabularyLargerThanTheCorpusAllows) {
  ExpectRefused(dir_, Prepare(dir_, "--src " + Quote(src_) + " --tgt " + Quote(tgt_) + " --vocab-size 5000"),
                {"vocabulary size 5000 is larger than this corpus allows (at most"});
  ExpectRefused(dir_, Prepare(dir_, "--src " + Quote(src_) + " --tgt " + Quote(tgt_) + " --vocab-size 10"),
                {"vocabulary size 10 is smaller than the"});
}

// A corpus whose only line is 1 MB: SentencePiece skips every line longer than 4192 bytes and
// failed with "Internal: ... [!sentences_.empty()]".
TEST_F(PrepareRefuses, LinesTooLongToLearnAVocabularyFrom) {
  const std::string long_src = dir_.Write("long.en", std::string(1 << 20, 'a') + "\n");
  const std::string long_tgt = dir_.Write("long.es", std::string(1 << 20, 'b') + "\n");
  ExpectRefused(dir_, Prepare(dir_, "--src " + Quote(long_src) + " --tgt " + Quote(long_tgt) + " --vocab-size 8"),
                {"no line is short enough to learn a vocabulary from: SentencePiece skips lines longer than 4192 "
                 "bytes"});
}

// An --out that cannot be written is said before the vocabulary is learnt (minutes on a large
// corpus): here the vocabulary asked for is one the corpus cannot give, and that is not what is
// said.
TEST_F(PrepareRefuses, AnOutputThatCannotBeWrittenBeforeLearning) {
  const std::string file = dir_.Write("notes.txt", "x");
  const auto r = RunPsformer("prepare --src " + Quote(src_) + " --tgt " + Quote(tgt_) + " --vocab-size 100000 --out " +
                             Quote(file + "/out"));
  ExpectRefused(dir_, r, {file + " is a file, not a directory"});
  EXPECT_EQ(r.output.find("vocabulary size"), std::string::npos) << r.output;
}

TEST_F(PrepareRefuses, ExistingOutputAndHalfAValidationPair) {
  std::filesystem::create_directory(dir_.File("out"));
  auto r = Prepare(dir_, Files(src_, tgt_));
  EXPECT_NE(r.exit_status, 0);
  EXPECT_NE(r.output.find("already exists; prepare never overwrites"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir_.File("out")));
  std::filesystem::remove(dir_.File("out"));
  const auto half = Prepare(dir_, Files(src_, tgt_) + " --valid-src " + Quote(src_));
  ExpectRefused(dir_, half, {"--valid-src and --valid-tgt go together"});
  EXPECT_EQ(half.exit_status, 2) << "a usage error, as the option parser's own";
  const auto no_out = RunPsformer("prepare --src " + Quote(src_) + " --tgt " + Quote(tgt_) + " --out ''");
  ExpectRefused(dir_, no_out, {"--out is empty"});
  EXPECT_EQ(no_out.exit_status, 2);
  ExpectRefused(dir_, Prepare(dir_, Files(src_, tgt_) + " --spm " + Quote(src_)), {"exclude each other"});
  ExpectRefused(dir_,
                RunPsformer("prepare --src " + Quote(src_) + " --tgt " + Quote(tgt_) + " --spm " + Quote(src_) +
                            " --out " + Quote(dir_.File("out"))),
                {"not a SentencePiece model"});
}

}  // namespace
}  // namespace psformer
