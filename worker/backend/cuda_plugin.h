// The CUDA backend as a library of its own, libpsformer_cuda.so, which psformer loads (dlopen) the
// first time a process asks for a GPU or for the devices it has. A process that never computes on
// a GPU (a server, a supervisor, a CPU or emulated worker, `status`, the tests of CPU code) then
// never maps cuBLAS: linked in, its ~600 MB of libraries cost every psformer process 0.16 s to
// start and ~95 MB of relocated private pages, and the binary could not start at all where no
// CUDA library is installed.
//
// The library and the binary are built together from one tree; the table below is all that
// crosses between them (C++ types are fine: same compiler, same standard library). psformer's
// executables export their psformer:: symbols, so the library's logging and tracing go to the
// process's own logger and trace (one state, not two copies).
#ifndef PSFORMER_WORKER_BACKEND_CUDA_PLUGIN_H_
#define PSFORMER_WORKER_BACKEND_CUDA_PLUGIN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "worker/backend/backend.h"

namespace psformer {

struct BackendChoice;

// Raised whenever the table changes; a library that reports another number is refused.
inline constexpr int kCudaPluginAbi = 1;

struct CudaPlugin {
  int abi = kCudaPluginAbi;
  size_t size = sizeof(CudaPlugin);
  // As cuda/cuda_device.h: visible devices, a device's memory, why there are none, and the CUDA
  // runtime and driver ("built with CUDA 13.0; driver for CUDA 13.0").
  int (*device_count)() = nullptr;
  uint64_t (*device_memory_bytes)(int device) = nullptr;
  std::string (*unavailable_reason)() = nullptr;
  std::string (*build_description)() = nullptr;
  // The CUDA backend `choice` names (choice.gpu >= 0), and what it computes with, as MakeBackend.
  StatusOr<std::unique_ptr<Backend<float>>> (*make_backend)(const BackendChoice& choice,
                                                            std::string* description) = nullptr;
};

// The library's file name, and the one symbol it exports for the loader (backend_factory.cc).
inline constexpr char kCudaPluginFile[] = "libpsformer_cuda.so";
inline constexpr char kCudaPluginSymbol[] = "psformer_cuda_plugin";

}  // namespace psformer

#endif  // PSFORMER_WORKER_BACKEND_CUDA_PLUGIN_H_
