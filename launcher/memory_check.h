// Whether a job's roles fit the machine `psformer train` runs on, from the config's memory
// estimate (common/memory_estimate.h): checked before the run directory is touched or a role
// process starts, so that a model too large is refused with the figures, not restarted after
// each failed allocation.
#ifndef PSFORMER_LAUNCHER_MEMORY_CHECK_H_
#define PSFORMER_LAUNCHER_MEMORY_CHECK_H_

#include <cstdint>
#include <string>

#include "common/config_loader.h"
#include "common/memory_estimate.h"

namespace psformer {

// Where the job's roles run, as the launcher will start them.
enum class JobPlacement {
  kLocal,        // train --local: one process
  kSingleNode,   // every server and worker on this machine
  kClusterRank,  // under mpirun: one role on this machine (which one is decided later)
};

// This machine as the check sees it; tests pass a made-up one.
struct MachineMemory {
  uint64_t host_bytes = 0;  // physical memory
  int gpus = 0;
  uint64_t gpu_bytes = 0;  // of the smallest GPU (0 = unknown)
};
// Its GPUs are counted (GpusFor) only for a backend that may compute on them.
MachineMemory ThisMachine(proto::ClusterConfig::Backend backend);
uint64_t HostMemoryBytes();  // physical memory, 0 when it cannot be asked

// The GPUs this machine offers `backend`: 0 for CPU and EMULATED without asking, since asking
// loads the CUDA library (backend_factory.h: a tenth of a second and ~200 MiB in every process
// that asks, for the whole job's life); GpuCount() for CUDA and AUTO.
int GpusFor(proto::ClusterConfig::Backend backend);

// The parameter count and each role's memory, as comment lines ("# ...") that --dry-run prints
// after the config (the output stays a valid config file).
std::string DescribeMemory(const JobConfig& config, const MemoryEstimate& estimate, JobPlacement placement,
                           const MachineMemory& machine);

// OK when what `placement` puts on this machine fits; else the figures and what to change.
Status CheckMemoryFits(const JobConfig& config, const MemoryEstimate& estimate, JobPlacement placement,
                       const MachineMemory& machine);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_MEMORY_CHECK_H_
