// The psformer command: parse the subcommand, hand over to it (launcher/commands.h). First, the
// OpenBLAS kernels this CPU runs best (worker/backend/blas_kernel_choice.h), which may run the
// process again before anything else happens.
#include <iostream>

#include "launcher/commands.h"
#include "launcher/exit_codes.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/role_supervisor.h"
#include "worker/backend/blas_kernel_choice.h"

int main(int argc, char** argv) {
  // An orderly stop mpirun passes on while this rank still starts waits for its handler.
  if (psformer::StartedByMpirun()) psformer::HoldOrderlyStopSignal();
  const psformer::Status kernels = psformer::UseBestBlasKernels(argv);
  if (!kernels.ok()) {
    std::cerr << "psformer: error: " << kernels.message() << "\n";
    return psformer::kExitUsage;
  }
  return psformer::RunCommandLine(argc, argv);
}
