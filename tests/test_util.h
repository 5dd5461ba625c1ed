// Helpers shared by test suites: temporary directories, running the psformer binary.
#ifndef PSFORMER_TESTS_TEST_UTIL_H_
#define PSFORMER_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace psformer::testing {

// A fresh directory under the system temp dir, removed when the object goes.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("psformer-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to `name` in this directory and returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(File(name)) << text;
    return File(name);
  }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_status = -1;  // the exit code, or 128 + signal.
  std::string output;    // stdout and stderr together.
};

// Runs a shell command line, capturing stdout and stderr together.
inline CommandResult RunShell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status))
    result.exit_status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    result.exit_status = 128 + WTERMSIG(status);
  return result;
}

// The source tree and the psformer binary the tests run: where the build put them, or the
// environment's PSFORMER_SOURCE_DIR / PSFORMER_BINARY where set (a build tree copied to another
// machine, e.g. by bench/gpu/make_bundle.sh).
inline std::string SourceDir() {
  const char* dir = std::getenv("PSFORMER_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : PSFORMER_SOURCE_DIR;
}
inline std::string PsformerBinary() {
  const char* binary = std::getenv("PSFORMER_BINARY");
  return binary != nullptr && *binary != '\0' ? binary : PSFORMER_BINARY;
}

// The PID of a process that has ended (a child reaped at once): one no process of this machine has
// now, until the kernel hands it out again.
inline pid_t EndedProcess() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

// Runs build/psformer with `arguments` (a shell-quoted string) from the source directory, with
// `environment` (shell-quoted NAME=VALUE words) added to its environment.
inline CommandResult RunPsformer(const std::string& arguments, const std::string& environment = "") {
  return RunShell("cd " + SourceDir() + " && " + (environment.empty() ? "" : environment + " ") + PsformerBinary() +
                  " " + arguments);
}

// Runs `mpirun -np PROCESSES psformer ARGUMENTS` from the source directory: one MPI rank a role,
// oversubscribed (the test machine has fewer cores than a job has roles) and allowed as root.
inline CommandResult RunPsformerUnderMpirun(int processes, const std::string& arguments) {
  return RunShell("cd " + SourceDir() + " && mpirun --allow-run-as-root --oversubscribe -np " +
                  std::to_string(processes) + " " + PsformerBinary() + " " + arguments);
}

// Runs one mpirun job of several programs (Open MPI's "-np 1 A : -np 2 B"): rank 0 runs psformer
// with `first`, and each further entry `processes` more ranks with its arguments, as hosts whose
// copies of a config or corpus differ would.
inline CommandResult RunPsformerRanksUnderMpirun(const std::string& first,
                                                 const std::vector<std::pair<int, std::string>>& others) {
  std::string command =
      "cd " + SourceDir() + " && mpirun --allow-run-as-root --oversubscribe -np 1 " + PsformerBinary() + " " + first;
  for (const auto& [processes, arguments] : others) {
    command += " : -np " + std::to_string(processes) + " " + PsformerBinary() + " " + arguments;
  }
  return RunShell(command);
}

// RunShell and RunPsformer with stdout and stderr on a pseudo-terminal (util-linux `script`), as a person at a
// terminal would run it: what only a terminal gets (progress meters) is in the output, with the
// terminal's \r\n line ends.
inline CommandResult RunShellInTerminal(const std::string& command) {
  std::string quoted;  // as one single-quoted argument of `script -c`
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return RunShell("script -qec '" + quoted + "' /dev/null </dev/null");
}
inline CommandResult RunPsformerInTerminal(const std::string& arguments) {
  return RunShellInTerminal("cd " + SourceDir() + " && " + PsformerBinary() + " " + arguments);
}

// The 64-hex-digit parameter digest `psformer checksum` prints for a model file; "" (and a test
// failure) when there is none.
inline std::string ModelDigest(const std::string& model) {
  const CommandResult r = RunPsformer("checksum " + model);
  std::smatch m;
  static const std::regex kHex("[0-9a-f]{64}");
  if (r.exit_status != 0 || !std::regex_search(r.output, m, kHex)) {
    ADD_FAILURE() << "checksum of " << model << " failed: " << r.output;
    return "";
  }
  return m.str();
}

// One of several runs of a job: its run directory's name and the flags it adds to the job's.
struct NamedRun {
  std::string name;
  std::string flags;
};

// Runs `psformer train JOB FLAGS --run-dir DIR/NAME` for `run` and returns the digest of the model
// it wrote ("", and a test failure showing the output, when it did not end with status 0).
inline std::string TrainedModelDigest(const TempDir& dir, const std::string& job, const NamedRun& run) {
  const std::string run_dir = dir.File(run.name);
  const CommandResult r = RunPsformer("train " + job + " " + run.flags + " --run-dir " + run_dir);
  EXPECT_EQ(r.exit_status, 0) << r.output;
  return ModelDigest(run_dir + "/model.bin");
}

// Trains `job` (`psformer train` flags) once per run, as TrainedModelDigest does, and checks that
// every run wrote a model and that all wrote the same one, bit for bit (docs/determinism.md).
inline ::testing::AssertionResult TrainSameModel(const TempDir& dir, const std::string& job,
                                                 const std::vector<NamedRun>& runs) {
  std::string first;
  for (const NamedRun& run : runs) {
    const std::string digest = TrainedModelDigest(dir, job, run);
    if (digest.empty()) return ::testing::AssertionFailure() << "run " << run.name << " wrote no model";
    if (first.empty()) first = digest;
    if (digest != first) {
      return ::testing::AssertionFailure() << "run " << run.name << " (" << run.flags << ") trained model " << digest
                                           << ", run " << runs.front().name << " " << first;
    }
  }
  return ::testing::AssertionSuccess();
}

// Every value of `key` in a metrics.jsonl, in file order.
inline std::vector<double> MetricValues(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  std::vector<double> values;
  const std::regex pattern("\"" + key + "\": ([-0-9.e+]+)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, pattern)) values.push_back(std::stod(m[1].str()));
  }
  return values;
}

// The whole of a text file ("" when it cannot be read).
inline std::string ReadTextFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Whether `what` occurs in `text` (command output, a log).
inline bool HasText(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// How many times `what` occurs in `text`, counting occurrences that do not overlap.
inline int CountText(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); !what.empty() && at != std::string::npos; at = text.find(what, at + what.size())) {
    ++count;
  }
  return count;
}

// The arguments of `psformer launch` running `psformer train TRAIN` with `ranks` ranks on a
// cluster of this one host, whose "remote" shell (an agent written into `dir`) runs the command here.
inline std::string LaunchOnThisHost(const TempDir& dir, int ranks, const std::string& train) {
  const std::string agent = dir.Write("agent", "#!/bin/sh\nshift\nexec \"$@\"\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  const std::string hosts = dir.Write("hosts", "localhost slots=" + std::to_string(ranks) + "\n");
  return "launch --hostfile " + hosts + " --np " + std::to_string(ranks) + " --rsh-agent " + agent + " -- train " +
         train;
}

// Whether a command ended with `exit_status` and said `text`; when not, the failure shows both
// and the command's whole output.
inline ::testing::AssertionResult EndsSaying(const CommandResult& result, int exit_status, const std::string& text) {
  if (result.exit_status == exit_status && HasText(result.output, text)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected exit status " << exit_status << " and \"" << text << "\"; got "
                                       << result.exit_status << " and:\n"
                                       << result.output;
}

// A variant of a command line that must be refused: the words it adds, and what the refusal says.
struct RefusedVariant {
  std::string words;
  std::string says;
};

// Runs `psformer PREFIX WORDS SUFFIX` for each variant and checks that it ends with `exit_status`,
// saying the variant's text.
inline void ExpectRefusedVariants(const std::string& prefix, const std::string& suffix, int exit_status,
                                  const std::vector<RefusedVariant>& variants) {
  for (const RefusedVariant& v : variants) {
    EXPECT_TRUE(EndsSaying(RunPsformer(prefix + v.words + suffix), exit_status, v.says)) << v.words;
  }
}

// Every *.log file of RUN_DIR/logs, concatenated.
inline std::string ReadRunLogs(const std::filesystem::path& run_dir) {
  std::string all;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir / "logs", ec)) {
    if (entry.path().extension() == ".log") all += ReadTextFile(entry.path());
  }
  return all;
}

// The push parts worker WORKER's client sent with the CRC-32Cs its copies recorded where they
// wrote the gradient (its count at the end, in the run's logs), or -1 where it logged none.
inline int PushPartsWithRecordedCrcs(const std::string& logs, int worker) {
  const std::regex line("worker-" + std::to_string(worker) +
                        " ps_client\\.cc:\\d+\\] ps client: (\\d+) push part\\(s\\) sent with the "
                        "CRC-32C recorded where the gradient was written");
  std::smatch m;
  return std::regex_search(logs, m, line) ? std::stoi(m[1]) : -1;
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_TEST_UTIL_H_
