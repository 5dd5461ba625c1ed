#include "common/config_loader.h"

#include <gtest/gtest.h>

#include <cctype>

#include "common/fault_plan.h"
#include "common/field_differences.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::TempDir;

std::string ConfigPath(const std::string& name) { return std::string(PSFORMER_SOURCE_DIR) + "/configs/" + name; }

TEST(ConfigLoader, BaseConfigHoldsThePapersNumbers) {
  auto config = ResolveConfig(ConfigPath("base.pbtxt"), {});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model().layers(), 6);
  EXPECT_EQ(config->model().d_model(), 512);
  EXPECT_EQ(config->model().d_ff(), 2048);
  EXPECT_EQ(config->model().heads(), 8);
  EXPECT_FLOAT_EQ(config->model().dropout(), 0.1f);
  EXPECT_FLOAT_EQ(config->model().label_smoothing(), 0.1f);
  EXPECT_EQ(config->model().norm_position(), proto::ModelConfig::POST_LN);
  EXPECT_FLOAT_EQ(config->optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(config->optimizer().beta2(), 0.98f);
  EXPECT_FLOAT_EQ(config->optimizer().epsilon(), 1e-9f);
  EXPECT_EQ(config->optimizer().warmup_steps(), 4000);
  EXPECT_EQ(config->training().max_steps(), 100000);
  EXPECT_EQ(config->batching().src_tokens_per_step(), 25000);
  EXPECT_EQ(config->batching().tgt_tokens_per_step(), 25000);
  EXPECT_EQ(config->checkpoint().average_last(), 5);
  EXPECT_FLOAT_EQ(config->checkpoint().every_minutes(), 10.0f);
}

TEST(ConfigLoader, BigConfigHoldsThePapersNumbers) {
  auto config = ResolveConfig(ConfigPath("big.pbtxt"), {});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model().layers(), 6);
  EXPECT_EQ(config->model().d_model(), 1024);
  EXPECT_EQ(config->model().d_ff(), 4096);
  EXPECT_EQ(config->model().heads(), 16);
  EXPECT_FLOAT_EQ(config->model().dropout(), 0.3f);
  EXPECT_EQ(config->training().max_steps(), 300000);
  EXPECT_EQ(config->checkpoint().average_last(), 20);
  EXPECT_EQ(config->optimizer().warmup_steps(), 4000);
}

TEST(ConfigLoader, EveryShippedConfigIsValid) {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PSFORMER_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".pbtxt") continue;
    auto config = ResolveConfig(entry.path().string(), {});
    EXPECT_TRUE(config.ok()) << entry.path() << ": " << config.status().ToString();
  }
}

TEST(ConfigLoader, FillsDefaultsOfUnsetFields) {
  auto config = ParseConfigText("name: \"x\"\nmodel { layers: 2 }\n", "inline");
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->model().has_d_model());
  FillDefaults(&*config);
  EXPECT_TRUE(config->model().has_d_model());
  EXPECT_EQ(config->model().d_model(), 512);
  EXPECT_EQ(config->model().layers(), 2);
  EXPECT_TRUE(config->cluster().has_consistency());
  EXPECT_NE(ConfigToText(*config).find("warmup_steps: 4000"), std::string::npos);
}

// FieldDifferences names each differing field by its path, values as the config spells them; an
// unset field and one set to its default are the same; `skip` leaves a field or a section out.
TEST(FieldDifferences, NamesEachFieldThatDiffersAndNoOther) {
  JobConfig a;
  JobConfig b;
  b.mutable_optimizer()->set_warmup_steps(4000);  // the default, set
  EXPECT_TRUE(FieldDifferences(a, b).empty());
  b.mutable_optimizer()->set_warmup_steps(77);
  b.mutable_data()->set_train_dir("x y");
  b.mutable_cluster()->add_host_groups(2);
  b.mutable_cluster()->add_host_groups(1);
  const auto differences = FieldDifferences(a, b);
  ASSERT_EQ(differences.size(), 3u);
  EXPECT_EQ(differences[0].path, "optimizer.warmup_steps");
  EXPECT_EQ(differences[0].a, "4000");
  EXPECT_EQ(differences[0].b, "77");
  EXPECT_EQ(differences[1].path, "data.train_dir");
  EXPECT_EQ(differences[1].a, "\"\"");
  EXPECT_EQ(differences[1].b, "\"x y\"");
  EXPECT_EQ(differences[2].path, "cluster.host_groups");
  EXPECT_EQ(differences[2].a, "[]");
  EXPECT_EQ(differences[2].b, "[2, 1]");
  const auto skipped =
      FieldDifferences(a, b, [](const std::string& path) { return path == "optimizer" || path == "data.train_dir"; });
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, "cluster.host_groups");
}

TEST(ConfigLoader, SyntaxErrorNamesFileLineAndColumn) {
  TempDir dir;
  const std::string path = dir.Write("bad.pbtxt", "name: \"x\"\nmodel {\n  layers: : 3\n}\n");
  auto config = LoadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find(path + ":3:"), std::string::npos) << config.status().message();
}

// A negative number for a field that takes none: protobuf says only "got: -"; the field is named.
TEST(ConfigLoader, ANegativeNumberForAnUnsignedFieldNamesTheField) {
  auto parsed = ParseConfigText("training {\n  max_steps: 5\n  seed: -1\n}\n", "cfg.pbtxt");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "cfg.pbtxt:3:9: a negative number for seed, which takes a whole number >= 0 (Expected integer, got: -)");
  parsed = ParseConfigText("training { seed:-7 }", "c");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("a negative number for seed"), std::string::npos)
      << parsed.status().message();
}

TEST(ConfigLoader, UnknownFieldIsRejectedWithItsNameAndTheFieldsItsSectionHas) {
  TempDir dir;
  const std::string path = dir.Write("bad.pbtxt", "model {\n  layerz: 3\n}\n");
  auto config = LoadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("layerz"), std::string::npos) << config.status().message();
  EXPECT_NE(config.status().message().find(":2:"), std::string::npos) << config.status().message();
  EXPECT_NE(config.status().message().find("(its fields: layers, d_model, d_ff, heads,"), std::string::npos)
      << config.status().message();
  // At the top level too.
  config = LoadConfigFile(dir.Write("top.pbtxt", "trainin { max_steps: 3 }\n"));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("(its fields: name, model, optimizer,"), std::string::npos)
      << config.status().message();
}

TEST(ConfigLoader, MissingFileIsNotFound) {
  auto config = LoadConfigFile("/nonexistent/psformer.pbtxt");
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(config.status().IsNotFound()) << config.status().ToString();
  EXPECT_NE(config.status().message().find("/nonexistent/psformer.pbtxt"), std::string::npos);
}

TEST(ConfigLoader, OverridesSetScalarsAndEnums) {
  auto config = ResolveConfig(ConfigPath("base.pbtxt"),
                              {"model.heads=16", "model.norm_position=PRE_LN", "cluster.consistency=SSP",
                               "training.seed=42", "model.dropout=0.3", "data.train_dir=/tmp/x"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model().heads(), 16);
  EXPECT_EQ(config->model().norm_position(), proto::ModelConfig::PRE_LN);
  EXPECT_EQ(config->cluster().consistency(), proto::ClusterConfig::SSP);
  EXPECT_EQ(config->training().seed(), 42u);
  EXPECT_FLOAT_EQ(config->model().dropout(), 0.3f);
  EXPECT_EQ(config->data().train_dir(), "/tmp/x");
}

TEST(ConfigLoader, LaterOverrideWins) {
  auto config = ResolveConfig(ConfigPath("base.pbtxt"), {"model.layers=3", "model.layers=4"});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->model().layers(), 4);
}

// A value the file does not hold is said with the --set that gave it, not blamed on the file.
TEST(ConfigLoader, AnInvalidValueFromASetIsNamedWithTheSet) {
  auto config = ResolveConfig(ConfigPath("base.pbtxt"), {"training.max_steps=20", "model.heads=0"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("base.pbtxt with --set model.heads=0: model.heads"), std::string::npos)
      << config.status().message();
  EXPECT_EQ(config.status().message().find("max_steps=20"), std::string::npos) << config.status().message();
}

TEST(ConfigLoader, SplitEmbeddingRunsFlatOrHostSummingUnderBspWithOverlap) {
  for (const char* groups : {"cluster.host_summing=false", "cluster.host_groups=2,2"}) {
    auto config =
        ResolveConfig(ConfigPath("copy.pbtxt"), {"cluster.workers=4", groups, "cluster.split_embedding=true"});
    ASSERT_TRUE(config.ok()) << groups << ": " << config.status().ToString();
    EXPECT_TRUE(config->cluster().split_embedding());
  }
  auto no_overlap = ResolveConfig(ConfigPath("copy.pbtxt"), {"cluster.workers=4", "cluster.host_groups=2,2",
                                                             "cluster.split_embedding=true", "cluster.overlap=false"});
  ASSERT_FALSE(no_overlap.ok());
  EXPECT_NE(no_overlap.status().message().find("needs cluster.overlap = true and consistency BSP"), std::string::npos)
      << no_overlap.status().message();
}

struct BadOverride {
  std::string assignment;
  std::string expected_fragment;
};

class ConfigRejection : public ::testing::TestWithParam<BadOverride> {};

TEST_P(ConfigRejection, NamesTheFieldAndTheReason) {
  auto config = ResolveConfig(ConfigPath("base.pbtxt"), {GetParam().assignment});
  ASSERT_FALSE(config.ok()) << GetParam().assignment;
  EXPECT_NE(config.status().message().find(GetParam().expected_fragment), std::string::npos)
      << "message: " << config.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Overrides, ConfigRejection,
    ::testing::Values(BadOverride{"model.heads=7", "model.heads = 7: d_model (512) must be divisible by heads"},
                      BadOverride{"model.heads=0", "model.heads = 0: must be positive"},
                      BadOverride{"model.layers=-1", "model.layers = -1: must be positive"},
                      BadOverride{"model.d_model=0", "model.d_model = 0: must be positive"},
                      BadOverride{"model.d_ff=0", "model.d_ff = 0: must be positive"},
                      BadOverride{"model.dropout=1.5", "model.dropout = 1.5: must be in [0, 1)"},
                      BadOverride{"model.label_smoothing=-0.1", "model.label_smoothing"},
                      BadOverride{"optimizer.warmup_steps=0", "optimizer.warmup_steps = 0: must be positive"},
                      BadOverride{"optimizer.beta2=1", "optimizer.beta2 = 1: must be in [0, 1)"},
                      BadOverride{"optimizer.epsilon=0", "optimizer.epsilon = 0: must be positive"},
                      BadOverride{"cluster.servers=0", "cluster.servers = 0: must be >= 1"},
                      BadOverride{"cluster.servers=100000000", "more servers than parameters"},
                      BadOverride{"cluster.heartbeat_timeout_ms=100", "cluster.heartbeat_timeout_ms"},
                      BadOverride{"training.max_steps=0", "training.max_steps = 0: must be positive"},
                      BadOverride{"batching.src_tokens_per_step=0", "batching.src_tokens_per_step"},
                      BadOverride{"checkpoint.keep_last=2", "checkpoint.keep_last = 2: must keep at least"},
                      BadOverride{"data.train_dir=", "data.train_dir"},
                      BadOverride{"data.task=COPY",
                                  "data.train_dir = \"data/wmt14-en-de\": is set, but data.task "
                                  "is COPY (the default), which reads no corpus"},
                      BadOverride{"model.headz=8",
                                  "ModelConfig has no field 'headz' (its fields: layers, d_model, d_ff, heads"},
                      BadOverride{"modle.heads=8", "JobConfig has no field 'modle' (its fields: name, model, "},
                      BadOverride{"model.heads=eight", "'eight' is not a valid value for model.heads"},
                      BadOverride{"model.norm_position=MIDDLE", "expected one of POST_LN PRE_LN"},
                      BadOverride{"model=3", "'model' is a section, not a value"},
                      BadOverride{"model.heads.x=3", "'heads' is a value, not a section"},
                      BadOverride{"fault.events=3", "repeated field"},
                      BadOverride{"noequals", "expected field.path=value"}),
    // Named by the assignment, in the characters a test name may hold: "model_heads_7".
    [](const auto& info) {
      std::string name = info.param.assignment;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(ConfigLoader, CorpusDirectoryMustExistToTrain) {
  auto config = ResolveConfig(ConfigPath("base.pbtxt"), {"data.train_dir=/nonexistent/data"});
  ASSERT_TRUE(config.ok());
  Status files = CheckConfigFiles(*config);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.message().find("/nonexistent/data"), std::string::npos);
  // A directory that `psformer prepare` did not write (its files named, the first missing).
  testing::TempDir dir;
  config->mutable_data()->set_train_dir(dir.path().string());
  files = CheckConfigFiles(*config);
  EXPECT_TRUE(files.IsNotFound());
  EXPECT_NE(files.message().find("has no spm.model: not a directory `psformer prepare` wrote"), std::string::npos)
      << files.message();
  dir.Write("spm.model", "x");
  files = CheckConfigFiles(*config);
  EXPECT_NE(files.message().find("has no train.bin"), std::string::npos) << files.message();
  // A directory where the file goes is named so, not taken for a missing file.
  std::filesystem::create_directory(dir.File("train.bin"));
  files = CheckConfigFiles(*config);
  EXPECT_NE(files.message().find("train.bin is a directory, not the file `psformer prepare` writes there"),
            std::string::npos)
      << files.message();
  std::filesystem::remove(dir.File("train.bin"));
  dir.Write("train.bin", "x");
  EXPECT_TRUE(CheckConfigFiles(*config).ok()) << "what the files hold is the workers' to check";
  // A file named where the directory goes (train.bin itself, say) is named as a file.
  config->mutable_data()->set_train_dir(dir.File("train.bin"));
  files = CheckConfigFiles(*config);
  EXPECT_NE(files.message().find("train.bin\" is a file, not a directory"), std::string::npos) << files.message();
  config->mutable_data()->set_train_dir(dir.path().string());
  config->mutable_cluster()->set_backend(proto::ClusterConfig::EMULATED);
  std::filesystem::remove(dir.File("train.bin"));
  EXPECT_TRUE(CheckConfigFiles(*config).ok()) << "emulated workers read no data";
}

TEST(ConfigLoader, FaultEventMustNameAnExistingRole) {
  auto config = ParseConfigText("fault { events { role: SERVER index: 3 at_step: 5 } }", "inline");
  ASSERT_TRUE(config.ok());
  FillDefaults(&*config);
  Status status = ValidateConfig(*config);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("fault.events[0].index = 3: no such server"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace psformer

namespace psformer {
namespace {

TEST(ConfigLoader, KillListBecomesFaultEvents) {
  auto config = ResolveConfig(std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt",
                              {"cluster.workers=2", "fault.kill=worker:1@10,server:0@12"});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto events = FaultEvents(config->fault());
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].role(), FaultEvent::WORKER);
  EXPECT_EQ((*events)[0].index(), 1);
  EXPECT_EQ((*events)[0].at_step(), 10);
  EXPECT_EQ((*events)[1].role(), FaultEvent::SERVER);
  EXPECT_EQ((*events)[1].at_step(), 12);
}

TEST(ConfigLoader, MalformedKillListIsRejected) {
  const std::string copy = std::string(PSFORMER_SOURCE_DIR) + "/configs/copy.pbtxt";
  for (const char* bad : {"fault.kill=worker1@10", "fault.kill=gpu:0@3", "fault.kill=worker:x@3",
                          "fault.kill=worker:0@3x", "fault.kill=worker:5@3", "fault.kill=worker:0@0"}) {
    auto config = ResolveConfig(copy, {bad});
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_NE(config.status().message().find("fault.kill"), std::string::npos) << config.status().message();
  }
}

// `config` with `sets` is refused, and the message names `field`.
void ExpectRefusedNaming(const std::string& config, const std::vector<std::string>& sets, const std::string& field) {
  auto resolved = ResolveConfig(config, sets);
  ASSERT_FALSE(resolved.ok()) << sets.back();
  EXPECT_NE(resolved.status().message().find(field), std::string::npos) << resolved.status().message();
}

TEST(ConfigLoader, SplitEmbeddingIsRefusedWhereItCannotWork) {
  const std::string copy = ConfigPath("copy.pbtxt");
  ASSERT_TRUE(ResolveConfig(copy, {"cluster.split_embedding=true", "cluster.workers=2"}).ok());
  const std::vector<std::vector<std::string>> refused = {
      {"cluster.split_embedding=true", "cluster.overlap=false"},
      {"cluster.split_embedding=true", "cluster.consistency=SSP"},
  };
  for (const auto& sets : refused) {
    auto config = ResolveConfig(copy, sets);
    ASSERT_FALSE(config.ok()) << sets[1];
    EXPECT_NE(config.status().message().find("cluster.split_embedding"), std::string::npos)
        << config.status().message();
  }
  auto negative =
      ResolveConfig(copy, {"cluster.backend=EMULATED", "model.vocab_size=100", "cluster.emulated_lookup_rows=-1"});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("cluster.emulated_lookup_rows"), std::string::npos)
      << negative.status().message();
  for (const char* blocks : {"cluster.output_projection_blocks=0", "cluster.output_projection_blocks=1025"}) {
    ExpectRefusedNaming(copy, {"cluster.split_embedding=true", blocks}, "cluster.output_projection_blocks");
  }
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.split_embedding=true", "cluster.output_projection_blocks=1"}).ok());
}

TEST(ConfigLoader, SendWindowAndBufferAreBounded) {
  const std::string copy = ConfigPath("copy.pbtxt");
  for (const char* window : {"cluster.send_window=-1", "cluster.send_window=1025"}) {
    ExpectRefusedNaming(copy, {window}, "cluster.send_window");
  }
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.send_window=0"}).ok());
  for (const char* buffer : {"cluster.send_buffer_kib=-1", "cluster.send_buffer_kib=1048577"}) {
    ExpectRefusedNaming(copy, {buffer}, "cluster.send_buffer_kib");
  }
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.send_buffer_kib=256"}).ok());
}

TEST(ConfigLoader, SlicesAreBoundedAndNeedAWindow) {
  const std::string copy = ConfigPath("copy.pbtxt");
  for (const char* slice : {"cluster.slice_kib=-1", "cluster.slice_kib=1048577"}) {
    ExpectRefusedNaming(copy, {slice}, "cluster.slice_kib");
  }
  ExpectRefusedNaming(copy, {"cluster.slice_kib=256", "cluster.send_window=0"}, "cluster.slice_kib");
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.slice_kib=256"}).ok());
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.slice_kib=0", "cluster.send_window=0"}).ok());
}

TEST(ConfigLoader, SumsFirstNeedsHeldAnswersHostSummingAndTheSameHostPath) {
  const std::string copy = ConfigPath("copy.pbtxt");
  for (const char* without : {"cluster.send_window=0", "cluster.host_summing=false", "cluster.same_host_shm=false"}) {
    ExpectRefusedNaming(copy, {"cluster.sums_first=true", without}, "cluster.sums_first");
  }
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.sums_first=true"}).ok());
  EXPECT_TRUE(ResolveConfig(copy, {"cluster.send_window=0"}).ok());
}

}  // namespace
}  // namespace psformer
