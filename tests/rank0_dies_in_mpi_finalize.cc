// Preloaded (LD_PRELOAD) by launch_errors_test into every rank of an mpirun job: rank 0 is
// killed as it calls MPI_Finalize, as mpirun kills a rank still finalizing once another rank has
// exited non-zero. What a failed job must undo has to be done by then. Other ranks finalize as
// usual.
#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>

extern "C" int MPI_Finalize() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank != nullptr && std::strcmp(rank, "0") == 0) raise(SIGKILL);
  using Finalize = int (*)();
  static const auto next = reinterpret_cast<Finalize>(dlsym(RTLD_NEXT, "MPI_Finalize"));
  return next();
}
