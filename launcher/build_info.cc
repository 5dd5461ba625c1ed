#include "launcher/build_info.h"

#include <google/protobuf/stubs/common.h>
#include <zmq.h>

#include <boost/version.hpp>

#include "common/transport/curve_keys.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/source_commit.h"  // generated at build time (cmake/SourceCommit.cmake)
#include "worker/backend/backend_factory.h"

namespace psformer {
namespace {

// A version packed as major * `major_unit` + minor * `minor_unit` + patch, as "3.21.12".
std::string Dotted(int packed, int major_unit, int minor_unit) {
  return std::to_string(packed / major_unit) + "." + std::to_string(packed % major_unit / minor_unit) + "." +
         std::to_string(packed % minor_unit);
}

}  // namespace

std::string SourceCommit() {
  const std::string commit = PSFORMER_SOURCE_COMMIT;
  const std::string date = PSFORMER_SOURCE_DATE;
  if (commit == "unknown") return "unknown (not built from a git checkout)";
  return date.empty() ? commit : commit + " (" + date + ")";
}

std::string BuildDescription() {
  int zmq_major = 0, zmq_minor = 0, zmq_patch = 0;
  zmq_version(&zmq_major, &zmq_minor, &zmq_patch);
  std::string out = "psformer " + SourceCommit() + "\n";
  out += "  CPU backend:  " + CpuBackendDescription() + "\n";
  out += "  CUDA backend: " + CudaBackendDescription() + "\n";
  out += "  ZeroMQ " + std::to_string(zmq_major) + "." + std::to_string(zmq_minor) + "." + std::to_string(zmq_patch) +
         (CurveAvailable() ? " (CURVE encryption available)" : " (without CURVE: cluster.authenticate cannot be on)") +
         ", Protocol Buffers " + Dotted(GOOGLE_PROTOBUF_VERSION, 1000000, 1000) + ", Boost " +
         Dotted(BOOST_VERSION, 100000, 100) + ", " + MpiLibraryName() + "\n";
  return out;
}

}  // namespace psformer
