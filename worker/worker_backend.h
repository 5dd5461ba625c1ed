// The backend a worker computes on: the CPU (OpenBLAS) with cluster.threads_per_process threads,
// or the cores of this machine shared among its cluster.workers; or CUDA device `gpu` with the
// matrix products of cluster.compute_dtype. Logs which, with the BLAS kernels or device name.
#ifndef PSFORMER_WORKER_WORKER_BACKEND_H_
#define PSFORMER_WORKER_WORKER_BACKEND_H_

#include <memory>

#include "common/proto/config.pb.h"
#include "common/status.h"
#include "worker/backend/backend.h"

namespace psformer {

// gpu: a CUDA device, or -1 for the CPU. Unimplemented for a GPU when this psformer was built
// without the CUDA backend; fails as CudaBackend::Create does when the device cannot be used.
StatusOr<std::unique_ptr<Backend<float>>> MakeWorkerBackend(const proto::JobConfig& config, int gpu);

}  // namespace psformer

#endif  // PSFORMER_WORKER_WORKER_BACKEND_H_
