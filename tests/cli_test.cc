// The psformer command as a user meets it: help, dry runs, and errors without stack traces.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::EndsSaying;
using testing::RunPsformer;
using testing::TempDir;

void ExpectNoStackTrace(const testing::CommandResult& r) {
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Aborted"), std::string::npos) << r.output;
  EXPECT_LT(r.exit_status, 128) << "killed by a signal: " << r.output;
}

// `psformer ARGUMENTS` ends with `exit_status` and says `text`, without a stack trace.
void ExpectEndsSaying(const std::string& arguments, int exit_status, const std::string& text) {
  const testing::CommandResult r = RunPsformer(arguments);
  EXPECT_TRUE(EndsSaying(r, exit_status, text));
  ExpectNoStackTrace(r);
}

// Every subcommand, as `psformer --help` lists them.
constexpr const char* kSubcommands[] = {"train",   "launch", "worker", "pserver",  "aggregator", "prepare", "translate",
                                        "average", "export", "bleu",   "checksum", "status",     "plot",    "version"};

TEST(Cli, HelpListsEverySubcommand) {
  auto r = RunPsformer("--help");
  EXPECT_EQ(r.exit_status, 0);
  for (const char* name : kSubcommands) {
    EXPECT_NE(r.output.find(std::string("  ") + name), std::string::npos) << name << "\n" << r.output;
  }
}

TEST(Cli, EverySubcommandHasHelp) {
  for (const char* name : kSubcommands) {
    auto r = RunPsformer(std::string(name) + " --help");
    ExpectNoStackTrace(r);
    EXPECT_EQ(r.exit_status, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string("usage: psformer ") + name), std::string::npos) << r.output;
    // `psformer help NAME` says the same.
    const auto asked = RunPsformer(std::string("help ") + name);
    EXPECT_EQ(asked.exit_status, 0) << asked.output;
    EXPECT_EQ(asked.output, r.output) << name;
  }
  ExpectEndsSaying("help status plot", 2, "one command at a time (psformer help COMMAND)");
  const auto usage = RunPsformer("--help");
  for (const char* help : {"help", "help help", "help --help", "help -h", "-h"}) {
    const auto r = RunPsformer(help);
    EXPECT_EQ(r.exit_status, 0) << help << "\n" << r.output;
    EXPECT_EQ(r.output, usage.output) << help;
  }
  ExpectEndsSaying("help trian", 2, "unknown command 'trian'");
}

// The commit it was built from (this checkout's, when it is one) and the libraries it runs with.
TEST(Cli, VersionNamesTheCommitAndTheLibraries) {
  const auto r = RunPsformer("version");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  ExpectNoStackTrace(r);
  const auto head = testing::RunShell("git -C " + testing::SourceDir() + " rev-parse HEAD 2>/dev/null");
  if (head.exit_status == 0 && head.output.size() >= 12) {
    EXPECT_EQ(r.output.rfind("psformer " + head.output.substr(0, 12), 0), 0u) << r.output << "\nHEAD " << head.output;
  } else {
    EXPECT_EQ(r.output.rfind("psformer unknown (not built from a git checkout)\n", 0), 0u) << r.output;
  }
  for (const char* part : {"\n  CPU backend:  OpenBLAS ", "; kernels here: ", "\n  CUDA backend: ", "\n  ZeroMQ ",
                           ", Protocol Buffers ", ", Boost ", "MPI"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }
  EXPECT_EQ(RunPsformer("--version").output, r.output);
  ExpectEndsSaying("version extra", 2, "psformer version: error: it takes no arguments (got 'extra')");
}

// A --run-dir below a file: the file is named, for the job and for --local alike (the system's
// "Not a directory" said nothing of which part of the path was wrong).
TEST(Cli, ARunDirectoryBelowAFileNamesTheFile) {
  TempDir dir;
  const std::string file = dir.Write("notes.txt", "x");
  for (const char* how : {"", "--local "}) {
    ExpectEndsSaying(std::string("train ") + how + "--config configs/copy.pbtxt --set training.max_steps=1 --run-dir " +
                         file + "/run",
                     1, file + " is a file, not a directory");
  }
}

// A shell left in a directory that was removed: relative paths fail there with "No such file or
// directory", even one to be created, and the error says why (the library's exceptions too).
TEST(Cli, AnErrorInARemovedDirectorySaysItIsGone) {
  TempDir dir;
  const std::string gone = dir.File("gone");
  const std::string in_gone =
      "mkdir " + gone + " && cd " + gone + " && rmdir " + gone + " && " + testing::PsformerBinary() + " ";
  const std::string note =
      "(the current directory no longer exists: relative paths cannot be found or made from it; cd to a directory "
      "that exists)";
  const std::string config = testing::SourceDir() + "/configs/copy.pbtxt";
  EXPECT_TRUE(EndsSaying(testing::RunShell(in_gone + "train --config " + config + " --run-dir run"), 1, note));
  EXPECT_TRUE(EndsSaying(testing::RunShell(in_gone + "prepare --src a --tgt b --out corpus"), 1, note));
  EXPECT_FALSE(std::filesystem::exists(gone));
}

TEST(Cli, UnknownSubcommandIsAUsageError) { ExpectEndsSaying("trian", 2, "unknown command 'trian'"); }

TEST(Cli, DryRunPrintsTheResolvedBaseConfig) {
  auto r = RunPsformer("train --config configs/base.pbtxt --dry-run");
  EXPECT_TRUE(EndsSaying(r, 0, "d_model: 512"));
  EXPECT_NE(r.output.find("warmup_steps: 4000"), std::string::npos) << r.output;
  // Defaults the file does not name are printed too.
  EXPECT_NE(r.output.find("max_positions: 1024"), std::string::npos) << r.output;
}

TEST(Cli, DryRunAppliesOverrides) {
  auto r = RunPsformer("train --config configs/base.pbtxt --set model.d_model=1024 --set model.heads=16 --dry-run");
  EXPECT_TRUE(EndsSaying(r, 0, "d_model: 1024"));
  EXPECT_NE(r.output.find("heads: 16"), std::string::npos) << r.output;
}

TEST(Cli, SyntaxErrorNamesLineThree) {
  TempDir dir;
  const std::string path = dir.Write("bad.pbtxt", "name: \"bad\"\nmodel {\n  layers 6 7\n}\n");
  auto r = RunPsformer("train --config " + path + " --dry-run");
  EXPECT_NE(r.exit_status, 0);
  ExpectNoStackTrace(r);
  EXPECT_NE(r.output.find(path + ":3:"), std::string::npos) << r.output;
}

TEST(Cli, BadHeadsOverrideFailsWithAMessageAboutHeads) {
  auto r = RunPsformer("train --config configs/base.pbtxt --set model.heads=7 --dry-run");
  EXPECT_NE(r.exit_status, 0);
  ExpectNoStackTrace(r);
  EXPECT_NE(r.output.find("model.heads = 7: d_model (512) must be divisible by heads"), std::string::npos) << r.output;
}

TEST(Cli, MissingConfigOptionIsAUsageError) { ExpectEndsSaying("train --dry-run", 2, "--config"); }

TEST(Cli, MissingConfigFileSaysSo) {
  ExpectEndsSaying("train --config /nonexistent.pbtxt", 1, "/nonexistent.pbtxt does not exist");
}

TEST(Cli, UnknownOptionIsAUsageError) { ExpectEndsSaying("train --config configs/base.pbtxt --bogus", 2, "bogus"); }

// A --set that cannot apply (no '=', no such field, a value of the wrong type) is a mistake of the
// command line: exit 2 from train and from launch alike, before any file or host is looked at.
TEST(Cli, ASetThatCannotApplyIsAUsageError) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"noequals", "--set noequals: expected field.path=value"},
      {"model.nosuch=1", "--set model.nosuch=1: "},
      {"model.heads=eight", "'eight' is not a valid value for model.heads"},
  };
  for (const auto& [setting, message] : cases) {
    SCOPED_TRACE(setting);
    ExpectEndsSaying("train --config /nonexistent.pbtxt --set " + setting + " --dry-run", 2, message);
    ExpectEndsSaying("launch --hostfile /nonexistent -np 1 -- train --config configs/copy.pbtxt --set " + setting +
                         " --run-dir " + dir.File("run"),
                     2, message);
  }
  ExpectEndsSaying("launch --hostfile /nonexistent -np 1 -- train --run-dir " + dir.File("run"), 2,
                   "the train arguments have no --config");
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
}

}  // namespace
}  // namespace psformer

namespace psformer {
namespace {

// A word no option takes is named, with the option it was most likely meant for where its value
// looks like one (Boost's own "too many positional options" named neither).
TEST(Cli, AStrayArgumentIsNamedWithTheOptionItWasMeantFor) {
  ExpectEndsSaying("train configs/copy.pbtxt", 2,
                   "psformer train: error: unexpected argument 'configs/copy.pbtxt' (did you mean --config "
                   "configs/copy.pbtxt?)");
  ExpectEndsSaying("translate runs/x/model.bin", 2, "unexpected argument 'runs/x/model.bin' (did you mean --model");
  ExpectEndsSaying("export runs/x/model.bin --out y", 2, "(did you mean --model runs/x/model.bin?)");
  ExpectEndsSaying("average configs --output a.bin", 2,
                   "unexpected argument 'configs' (did you mean --run-dir configs?)");
  ExpectEndsSaying("train --config configs/base.pbtxt --dry-run extra", 2,
                   "unexpected argument 'extra': every argument goes with an option");
  // A command that takes a positional argument refuses a second one by name.
  ExpectEndsSaying("status configs configs", 2, "psformer status: error: unexpected argument 'configs'\n");
  ExpectEndsSaying("checksum a.bin b.bin", 2, "unexpected argument 'b.bin'");
}

TEST(Cli, AResultThatCannotBeWrittenToStandardOutputIsAFailure) {
  TempDir dir;
  const std::string text = dir.Write("text.txt", "the cat sat on the mat\n");
  for (const std::string& command :
       {"bleu --hyp " + text + " --ref " + text, std::string("train --config configs/copy.pbtxt --dry-run"),
        std::string("--help"), std::string("translate --help")}) {
    auto ok = RunPsformer(command + " > /dev/null");
    EXPECT_EQ(ok.exit_status, 0) << command << "\n" << ok.output;
    // Standard error stays on the captured pipe; only standard output goes to the full device.
    auto full = testing::RunShell("cd " + testing::SourceDir() + " && { " + testing::PsformerBinary() + " " + command +
                                  " > /dev/full; }");
    EXPECT_EQ(full.exit_status, 1) << command << "\n" << full.output;
    EXPECT_NE(full.output.find("cannot write to standard output: No space left on device"), std::string::npos)
        << command << "\n"
        << full.output;
  }
}

TEST(Cli, AnEmptyConfigFileIsRefusedUnlessEveryFieldComesFromSet) {
  TempDir dir;
  for (const char* text : {"", "# nothing but a comment\n\n"}) {
    const std::string path = dir.Write("empty.pbtxt", text);
    auto r = RunPsformer("train --config " + path + " --dry-run");
    EXPECT_EQ(r.exit_status, 1) << r.output;
    ExpectNoStackTrace(r);
    EXPECT_NE(r.output.find(path + " sets nothing"), std::string::npos) << r.output;
  }
  const std::string path = dir.Write("empty.pbtxt", "");
  auto set_only = RunPsformer("train --config " + path + " --set model.d_model=64 --set model.layers=1 --dry-run");
  EXPECT_TRUE(EndsSaying(set_only, 0, "d_model: 64"));
}

TEST(Cli, NonFiniteSettingsAreRefusedUpFrontByTheRunAndTheDryRunAlike) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"optimizer.epsilon=inf", "optimizer.epsilon = inf: must be a finite number"},
      {"schedule.scale=inf", "schedule.scale = inf: must be a finite number"},
      {"model.dropout=nan", "model.dropout = nan: must be a finite number"},
      {"optimizer.clip_norm=-inf", "optimizer.clip_norm = -inf: must be a finite number"},
  };
  for (const auto& [setting, message] : cases) {
    const std::string run = dir.File("run");
    ExpectEndsSaying("train --config configs/copy.pbtxt --set " + setting + " --dry-run", 1, message);
    ExpectEndsSaying("train --config configs/copy.pbtxt --set " + setting + " --run-dir " + run, 1, message);
    EXPECT_FALSE(std::filesystem::exists(run)) << setting;
  }
}

TEST(Cli, ADryRunRefusesTheFlagsAndRunDirectoryTheRunRefuses) {
  TempDir dir;
  ExpectEndsSaying("train --config configs/copy.pbtxt --resume --dry-run", 2, "--resume needs --run-dir");
  ExpectEndsSaying("train --config configs/copy.pbtxt --resume --dry-run --run-dir " + dir.File("none"), 1,
                   "does not exist");
  EXPECT_FALSE(std::filesystem::exists(dir.File("none")));
}

// cluster.threads_per_process far above this machine's cores: every role process would try to
// start that many threads. The run refuses it before it makes the run directory; a dry run (often
// made on another machine than the one that trains) warns.
TEST(Cli, FarMoreThreadsThanCoresAreRefusedByTheRunAndWarnedByTheDryRun) {
  TempDir dir;
  const std::string run = dir.File("run");
  const std::string says = "cluster.threads_per_process 100000 is far more threads than the";
  ExpectEndsSaying("train --config configs/copy.pbtxt --set cluster.threads_per_process=100000 --run-dir " + run, 1,
                   says);
  EXPECT_FALSE(std::filesystem::exists(run));
  ExpectEndsSaying("train --config configs/copy.pbtxt --set cluster.threads_per_process=100000 --dry-run", 0,
                   "warning: " + says);
}

// cluster.workers = 0 resolves to a worker per GPU (1 on a machine without): host groups adding up
// to another count are refused by the run on this machine, and warned of by its dry run, which
// said nothing before.
TEST(Cli, HostGroupsThatTheResolvedWorkerCountDoesNotMatchAreWarnedByTheDryRun) {
  TempDir dir;
  const std::string job = "train --config configs/copy.pbtxt --set cluster.workers=0 --set cluster.host_groups=2,2";
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "a machine with GPUs makes a worker per GPU";
  ExpectEndsSaying(job + " --dry-run", 0,
                   "warning: cluster.host_groups [2, 2] add up to 4 workers, but cluster.workers = 0 makes 1 on this "
                   "machine (a worker per GPU, or 1 without): the run here would refuse it; set cluster.workers=4");
  ExpectEndsSaying(job + " --run-dir " + dir.File("run"), 1, "add up to 4 workers, but the job has 1");
  EXPECT_FALSE(std::filesystem::exists(dir.File("run")));
}

// Encryption asked for and authentication turned off: the job would run unencrypted without a
// word. Refused by the run (before its directory exists) and the dry run alike.
TEST(Cli, EncryptionWithoutAuthenticationIsRefused) {
  TempDir dir;
  const std::string run = dir.File("run");
  const std::string settings = " --set cluster.encryption=AES_256_GCM --set cluster.authenticate=false";
  const std::string says = "cluster.encryption = AES_256_GCM: needs cluster.authenticate = true";
  ExpectEndsSaying("train --config configs/copy.pbtxt" + settings + " --dry-run", 1, says);
  ExpectEndsSaying("train --config configs/copy.pbtxt" + settings + " --run-dir " + run, 1, says);
  EXPECT_FALSE(std::filesystem::exists(run));
  auto plain = RunPsformer("train --config configs/copy.pbtxt --set cluster.authenticate=false --dry-run");
  EXPECT_EQ(plain.exit_status, 0) << plain.output;
}

// A config saved with a UTF-8 byte-order mark (some editors' default) reads as without it.
TEST(Cli, AConfigWithAByteOrderMarkReadsAsWithout) {
  TempDir dir;
  const std::string path = dir.Write("bom.pbtxt", "\xEF\xBB\xBFname: \"bom\"\nmodel {\n  d_model: 32\n}\n");
  ExpectEndsSaying("train --config configs/copy.pbtxt --dry-run", 0, "name: \"copy\"");
  ExpectEndsSaying("train --config " + path + " --dry-run", 0, "d_model: 32");
}

// A device or a pipe given where a file goes is read in bounded memory: /dev/zero as a config,
// a hostfile or an --spm fails at once, and as a model it is not read past its magic, where
// before each read until memory ran out. A config from a pipe still reads.
TEST(Cli, ADeviceGivenAsAFileFailsAtOnceAndAPipeReads) {
  ExpectEndsSaying("train --config /dev/zero --dry-run", 1,
                   "config file /dev/zero gave more than 16 MiB without ending: it is not a regular file (a device, "
                   "or a pipe that does not end?)");
  ExpectEndsSaying("launch --hostfile /dev/zero -np 2 -- train --config configs/copy.pbtxt --run-dir /nonexistent/r", 1,
                   "hostfile /dev/zero gave more than 16 MiB without ending");
  ExpectEndsSaying("checksum /dev/zero", 1, "model file /dev/zero: not a psformer model file (wrong magic number)");
  const testing::CommandResult piped =
      testing::RunShell("cd " + testing::SourceDir() + " && cat configs/copy.pbtxt | " + testing::PsformerBinary() +
                        " train --config /dev/stdin --dry-run");
  EXPECT_EQ(piped.exit_status, 0) << piped.output;
  EXPECT_NE(piped.output.find("name: \"copy\""), std::string::npos) << piped.output;
}

// An empty name (a script's unset variable) is a usage error that says so, not "cannot open :"
// from deep inside the command.
TEST(Cli, AnEmptyNameIsAUsageErrorThatSaysSo) {
  ExpectEndsSaying("checksum ''", 2, "psformer checksum: error: file is empty");
  ExpectEndsSaying("status ''", 2, "psformer status: error: run-dir is empty");
  ExpectEndsSaying("average --run-dir runs --output ''", 2, "psformer average: error: --output is empty");
  ExpectEndsSaying("plot runs --out ''", 2, "psformer plot: error: --out is empty");
  ExpectEndsSaying("train --config ''", 2, "psformer train: error: --config is empty");
}

// An aggregator of a config without host groups: there is none to be, said so (it read
// "--index 0 is outside 0..-1").
TEST(Cli, AnAggregatorOfAConfigWithoutHostGroupsSaysThereIsNone) {
  ExpectEndsSaying(
      "aggregator --index 0 --config configs/copy.pbtxt --run-dir runs/none --endpoint ipc:///nowhere "
      "--servers tcp://127.0.0.1:9",
      2, "has no host groups (cluster.host_groups is empty: no aggregator runs)");
}

TEST(Cli, AnUnclosedSectionIsNamedAsSuch) {
  TempDir dir;
  const std::string path = dir.Write("open.pbtxt", "name: \"open\"\nmodel {\n  layers: 2\n");
  ExpectEndsSaying("train --config " + path + " --dry-run", 1,
                   "the end of the config (is a '{' not closed by its '}'?)");
}

TEST(Cli, HelpShowsDefaultsAsAPersonWritesThem) {
  auto translate = RunPsformer("translate --help");
  EXPECT_TRUE(EndsSaying(translate, 0, "--alpha arg (=0.6)"));
  EXPECT_NE(translate.output.find("--max-len-a arg (=1)"), std::string::npos) << translate.output;
  auto prepare = RunPsformer("prepare --help");
  EXPECT_NE(prepare.output.find("--max-length-ratio arg (=3)"), std::string::npos) << prepare.output;
  for (const char* name :
       {"train", "worker", "pserver", "prepare", "translate", "average", "export", "bleu", "checksum"}) {
    auto r = RunPsformer(std::string(name) + " --help");
    EXPECT_EQ(r.output.find("0000000"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("9999999"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace psformer
