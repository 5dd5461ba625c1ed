#include "worker/backend/backend_factory.h"

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "worker/backend/blas_kernel_choice.h"
#include "worker/backend/cpu_backend.h"
#include "worker/backend/cuda_plugin.h"

namespace psformer {
namespace {

struct LoadedPlugin {
  const CudaPlugin* table = nullptr;  // null: not loaded, `why` says why
  std::string path;                   // where it was loaded from
  std::string why;
};

// Where libpsformer_cuda.so may lie: beside the running binary (build/psformer, an unpacked
// bundle's bin/), in ../lib from it (a bundle's or an installation's lib/), and in the build
// directory it was made in (the tests and benchmarks in build/tests/, build/bench/).
std::vector<std::filesystem::path> PluginCandidates() {
  std::vector<std::filesystem::path> paths;
  std::error_code error;
  const auto binary = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    paths.push_back(binary.parent_path() / kCudaPluginFile);
    paths.push_back(binary.parent_path().parent_path() / "lib" / kCudaPluginFile);
  }
#ifdef PSFORMER_CUDA_PLUGIN_BUILD_PATH
  paths.emplace_back(PSFORMER_CUDA_PLUGIN_BUILD_PATH);
#endif
  return paths;
}

LoadedPlugin Load() {
  LoadedPlugin loaded;
#ifndef PSFORMER_HAVE_CUDA
  loaded.why = "this psformer was built without the CUDA backend (PSFORMER_CUDA=OFF or no nvcc)";
  return loaded;
#else
  std::string looked;
  for (const auto& path : PluginCandidates()) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) {
      looked += (looked.empty() ? "" : ", ") + path.string();
      continue;
    }
    // RTLD_NOW: a symbol missing from the library or from the CUDA libraries it needs fails here,
    // with dlerror's words, not at the first call of a kernel.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error_text = dlerror();
      std::string what = error_text != nullptr ? error_text : "dlopen failed";
      if (what.rfind(path.string() + ": ", 0) == 0) what.erase(0, path.string().size() + 2);  // named once
      loaded.why = "cannot load the CUDA backend " + path.string() + ": " + what;
      return loaded;
    }
    using Entry = const CudaPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaPluginSymbol));
    const CudaPlugin* table = entry != nullptr ? entry() : nullptr;
    if (table == nullptr || table->abi != kCudaPluginAbi || table->size != sizeof(CudaPlugin)) {
      loaded.why = "the CUDA backend " + path.string() +
                   " is not the one built with this psformer (rebuild both: scripts/build)";
      return loaded;  // not unloaded: CUDA libraries are not made to be
    }
    loaded.table = table;
    loaded.path = path.string();
    return loaded;
  }
  loaded.why = "the CUDA backend " + std::string(kCudaPluginFile) + " is not installed here (looked in " + looked +
               "; it is built beside build/psformer)";
  return loaded;
#endif
}

const LoadedPlugin& Plugin() {
  static const LoadedPlugin plugin = Load();
  return plugin;
}

}  // namespace

StatusOr<std::unique_ptr<Backend<float>>> MakeBackend(const BackendChoice& choice, std::string* description) {
  if (choice.gpu < 0) {
    auto cpu = std::make_unique<CpuBackend<float>>(choice.cpu_threads);
    if (description != nullptr) {
      *description = "the CPU, " + std::to_string(cpu->threads()) + " thread(s), OpenBLAS kernels " + BlasCoreName() +
                     " (" + BlasKernelReason() + ")";
    }
    return std::unique_ptr<Backend<float>>(std::move(cpu));
  }
  const LoadedPlugin& plugin = Plugin();
  if (plugin.table == nullptr) {
#ifdef PSFORMER_HAVE_CUDA
    return Status::Unavailable("--gpu " + std::to_string(choice.gpu) + ": " + plugin.why);
#else
    return Status::Unimplemented("--gpu " + std::to_string(choice.gpu) + ": " + plugin.why);
#endif
  }
  return plugin.table->make_backend(choice, description);
}

std::string CpuBackendDescription() {
  return BlasLibraryDescription() + "; kernels here: " + BlasCoreName() + " (" + BlasKernelReason() + ")";
}

int GpuCount() {
  const LoadedPlugin& plugin = Plugin();
  return plugin.table != nullptr ? plugin.table->device_count() : 0;
}

uint64_t GpuMemoryBytes(int device) {
  const LoadedPlugin& plugin = Plugin();
  return plugin.table != nullptr ? plugin.table->device_memory_bytes(device) : 0;
}

std::string GpuUnavailableReason() {
  const LoadedPlugin& plugin = Plugin();
  return plugin.table != nullptr ? plugin.table->unavailable_reason() : "no CUDA device: " + plugin.why;
}

std::string CudaBackendDescription() {
#ifndef PSFORMER_HAVE_CUDA
  return "not built (PSFORMER_CUDA=OFF or no nvcc)";
#else
  const LoadedPlugin& plugin = Plugin();
  if (plugin.table == nullptr) return "not available: " + plugin.why;
  return plugin.table->build_description() + " (" + plugin.path + ")";
#endif
}

}  // namespace psformer
