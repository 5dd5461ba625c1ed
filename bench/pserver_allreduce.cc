// Benchmark: MPI_Allreduce (sum) of the same fp32 vector across N processes, for comparison with
// the parameter-server round trip (pserver_roundtrip). Run:
//   mpirun --allow-run-as-root --oversubscribe -np N build/bench/pserver_allreduce [--params P] [--iters K]
// The C API only: the C++ bindings of Open MPI are deprecated and not linked.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  long long params = 63'000'000;
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--params") params = std::atoll(argv[i + 1]);
    if (k == "--iters") iters = std::atoi(argv[i + 1]);
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<float> send(static_cast<size_t>(params), 1e-3f), recv(static_cast<size_t>(params));
  double best = 1e30;
  for (int it = 0; it < iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MPI_Allreduce(send.data(), recv.data(), static_cast<int>(params), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double local = MPI_Wtime() - start, slowest = 0;
    MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, slowest);
  }
  if (rank == 0) {
    std::printf("MPI_Allreduce of %lld fp32 (%.1f MB) across %d processes: %.1f ms  %.2f GB/s (vector / time)\n",
                params, params * 4 / 1e6, size, best * 1e3, params * 4 / best / 1e9);
  }
  MPI_Finalize();
  return 0;
}
