// The CUDA backend as a library of its own (worker/backend/cuda_plugin.h): the psformer binary
// does not need CUDA's libraries to start, loads the backend when asked, shares its logging with
// it, and names what is wrong when the library is broken.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::RunShell;

// The dynamic loader's list of what the binary needs, as ldd prints it (the binary is not run).
TEST(CudaLibrary, TheBinaryStartsWithoutCudasLibraries) {
  const auto r = RunShell("LD_TRACE_LOADED_OBJECTS=1 " + testing::PsformerBinary());
  ASSERT_EQ(r.exit_status, 0) << r.output;
  ASSERT_NE(r.output.find("libc.so"), std::string::npos) << "no list of libraries:\n" << r.output;
  for (const char* cuda : {"libcudart", "libcublas", "libcuda."}) {
    EXPECT_EQ(r.output.find(cuda), std::string::npos) << cuda << "\n" << r.output;
  }
}

// Which of a job's processes loaded the CUDA library, from the dynamic loader's log of the files
// each opened (LD_DEBUG=files, a file per process): their count, and how many loaded it.
struct Loads {
  int processes = 0;
  int with_cuda_library = 0;
};
Loads CudaLibraryLoadsOfATrainingJob(const std::string& backend) {
  testing::TempDir dir;
  const std::filesystem::path logs = dir.path() / "ld";
  std::filesystem::create_directories(logs);
  const auto train = testing::RunPsformer("train --config configs/copy.pbtxt --run-dir " +
                                              (dir.path() / "run").string() +
                                              " --set training.max_steps=10 --set cluster.backend=" + backend,
                                          "LD_DEBUG=files LD_DEBUG_OUTPUT=" + (logs / "process").string());
  EXPECT_EQ(train.exit_status, 0) << train.output;
  Loads loads;
  for (const auto& entry : std::filesystem::directory_iterator(logs)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    ++loads.processes;
    if (text.str().find("libpsformer_cuda.so") != std::string::npos) ++loads.with_cuda_library;
  }
  return loads;
}

// A CPU job never loads the CUDA library, in any of its processes: the launcher does not count
// GPUs it will not use (launcher/memory_check.h, GpusFor).
TEST(CudaLibrary, ACpuJobLoadsItInNoProcess) {
  const Loads cpu = CudaLibraryLoadsOfATrainingJob("CPU");
  EXPECT_GE(cpu.processes, 3);  // the launcher, a server and a worker at least
  EXPECT_EQ(cpu.with_cuda_library, 0);
#ifdef PSFORMER_HAVE_CUDA
  // The log would show it: with AUTO the launcher asks for the GPUs, and loads it.
  const Loads automatic = CudaLibraryLoadsOfATrainingJob("AUTO");
  EXPECT_GE(automatic.with_cuda_library, 1);
#endif
}

#ifdef PSFORMER_HAVE_CUDA
// `version` loads the library (all its symbols resolved, RTLD_NOW) and says where from; the
// library's logging and trace calls bind to the binary's own functions, not to its copies.
TEST(CudaLibrary, VersionLoadsItAndItLogsThroughTheBinary) {
  const auto r = testing::RunPsformer("version", "LD_DEBUG=bindings");
  ASSERT_EQ(r.exit_status, 0) << r.output;
  EXPECT_NE(r.output.find("libpsformer_cuda.so)\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not available"), std::string::npos) << r.output;
  for (const char* symbol : {"_ZN8psformer7LogLine", "_ZN8psformer5Trace3on_E"}) {
    bool to_binary = false;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("binding file ") == std::string::npos || line.find(symbol) == std::string::npos) continue;
      if (line.find("libpsformer_cuda.so [0] to ") == std::string::npos) continue;
      EXPECT_NE(line.find(" to " + testing::PsformerBinary() + " [0]"), std::string::npos) << line;
      to_binary = true;
    }
    EXPECT_TRUE(to_binary) << "the library's " << symbol << " was never bound:\n" << r.output.substr(0, 4000);
  }
}

// A broken library beside the binary (a copy, so that it is the first place looked): every
// command that asks for a GPU says which file and why, and none crashes.
TEST(CudaLibrary, ABrokenLibraryIsNamedAndNothingCrashes) {
  testing::TempDir dir;
  const std::string binary = (dir.path() / "psformer").string();
  std::filesystem::copy_file(testing::PsformerBinary(), binary);
  const std::string library = (dir.path() / "libpsformer_cuda.so").string();
  std::ofstream(library) << "not a library\n";

  const auto version = RunShell("cd " + testing::SourceDir() + " && " + binary + " version");
  EXPECT_EQ(version.exit_status, 0) << version.output;
  EXPECT_NE(version.output.find("CUDA backend: not available: cannot load the CUDA backend " + library + ": "),
            std::string::npos)
      << version.output;

  const std::string run = (dir.path() / "run").string();
  const auto train = RunShell("cd " + testing::SourceDir() + " && " + binary +
                              " train --config configs/copy.pbtxt --set cluster.backend=CUDA --run-dir " + run);
  EXPECT_EQ(train.exit_status, 1) << train.output;
  EXPECT_NE(train.output.find("psformer train: error: cluster.backend = CUDA but this machine"), std::string::npos)
      << train.output;
  EXPECT_NE(train.output.find("cannot load the CUDA backend " + library), std::string::npos) << train.output;
  EXPECT_FALSE(std::filesystem::exists(run)) << "a refused run made its directory";
}
#endif

}  // namespace
}  // namespace psformer
