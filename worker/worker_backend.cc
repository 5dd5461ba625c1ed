#include "worker/worker_backend.h"

#include <string>

#include "common/logging.h"
#include "common/role_threads.h"
#include "worker/backend/backend_factory.h"

namespace psformer {

StatusOr<std::unique_ptr<Backend<float>>> MakeWorkerBackend(const proto::JobConfig& config, int gpu) {
  BackendChoice choice;
  choice.gpu = gpu;
  choice.cpu_threads = WorkerThreads(config);
  choice.bf16_gemm = config.cluster().compute_dtype() == proto::ClusterConfig::BF16;
  std::string description;
  PSF_ASSIGN_OR_RETURN(auto backend, MakeBackend(choice, &description));
  PSF_LOG(Info) << "computing on " << description;
  return backend;
}

}  // namespace psformer
