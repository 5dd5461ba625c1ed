// What this psformer is: the commit it was built from, and the libraries it was built with and
// runs now. `psformer version` prints it; a job's supervisor logs the commit when it starts, so a
// run's logs say which build trained it.
#ifndef PSFORMER_LAUNCHER_BUILD_INFO_H_
#define PSFORMER_LAUNCHER_BUILD_INFO_H_

#include <string>

namespace psformer {

// "c06c389abcd0 (2026-12-03)", with "-dirty" after the commit when the tree had changes not
// committed; "unknown (not built from a git checkout)" without git.
std::string SourceCommit();

// What `psformer version` prints: the commit, then a line each for the backends and the
// libraries (OpenBLAS's build and the kernels it runs here, CUDA, ZeroMQ with or without CURVE,
// Protocol Buffers, Boost, MPI).
std::string BuildDescription();

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_BUILD_INFO_H_
