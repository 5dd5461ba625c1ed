#include "launcher/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "worker/backend/backend_factory.h"

namespace psformer {
namespace {

using Wide = unsigned __int128;  // sums of role sizes cannot wrap around here

uint64_t Clamp(Wide v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); }

// The roles this machine runs and where their memory goes.
struct Placement {
  bool gpu_workers = false;
  uint64_t worker_bytes = 0;  // one worker's host memory
  uint64_t servers = 0;
  uint64_t workers = 0;
  uint64_t host_bytes = 0;  // everything in this machine's memory
};

Placement Place(const JobConfig& config, const MemoryEstimate& e, JobPlacement where, const MachineMemory& machine) {
  Placement p;
  const auto& cluster = config.cluster();
  if (where == JobPlacement::kLocal) {
    p.host_bytes = e.local_bytes;
    return p;
  }
  p.gpu_workers = cluster.backend() == proto::ClusterConfig::CUDA ||
                  (cluster.backend() == proto::ClusterConfig::AUTO && machine.gpus > 0);
  // A GPU worker keeps its model and activations on the GPU; an emulated one has none at all.
  // Either holds only the pulled parameters and the gradient in host memory.
  const bool host_buffers_only = p.gpu_workers || cluster.backend() == proto::ClusterConfig::EMULATED;
  p.worker_bytes = host_buffers_only ? e.worker_host_bytes : e.worker_bytes;
  if (where == JobPlacement::kClusterRank) {
    // Which role this rank runs is decided once MPI has started; either must fit.
    p.host_bytes = std::max(e.server_bytes, p.worker_bytes);
    return p;
  }
  p.servers = static_cast<uint64_t>(cluster.servers());
  p.workers = cluster.workers() > 0 ? static_cast<uint64_t>(cluster.workers())
                                    : static_cast<uint64_t>(p.gpu_workers ? std::max(1, machine.gpus) : 1);
  p.host_bytes = Clamp(Wide(p.servers) * e.server_bytes + Wide(p.workers) * p.worker_bytes);
  return p;
}

}  // namespace

uint64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

int GpusFor(proto::ClusterConfig::Backend backend) {
  if (backend == proto::ClusterConfig::CPU || backend == proto::ClusterConfig::EMULATED) return 0;
  return GpuCount();
}

MachineMemory ThisMachine(proto::ClusterConfig::Backend backend) {
  MachineMemory m;
  m.host_bytes = HostMemoryBytes();
  m.gpus = GpusFor(backend);
  for (int g = 0; g < m.gpus; ++g) {
    const uint64_t bytes = GpuMemoryBytes(g);
    if (bytes > 0 && (m.gpu_bytes == 0 || bytes < m.gpu_bytes)) m.gpu_bytes = bytes;
  }
  return m;
}

std::string DescribeMemory(const JobConfig& config, const MemoryEstimate& e, JobPlacement where,
                           const MachineMemory& machine) {
  std::ostringstream out;
  out << "# parameters: " << e.parameters;
  if (ResolvedVocabSize(config) == 0) out << " (without the embedding: the vocabulary size comes from the data)";
  out << "\n# memory, estimated from below: a server shard " << FormatBytes(e.server_bytes) << ", a worker "
      << FormatBytes(e.worker_bytes) << " (activations " << FormatBytes(e.worker_activation_bytes)
      << "), train --local " << FormatBytes(e.local_bytes) << "\n";
  const Placement p = Place(config, e, where, machine);
  if (where == JobPlacement::kSingleNode) {
    out << "# on this machine: " << p.servers << " server(s) and " << p.workers << " worker(s) need "
        << FormatBytes(p.host_bytes) << " of its " << FormatBytes(machine.host_bytes) << " of memory";
    if (p.gpu_workers) {
      out << "; a GPU worker needs " << FormatBytes(e.worker_compute_bytes) << " of GPU memory ("
          << (machine.gpu_bytes > 0 ? "its GPU has " + FormatBytes(machine.gpu_bytes) : "no GPU visible here") << ")";
    }
    out << "\n";
  }
  return out.str();
}

Status CheckMemoryFits(const JobConfig& config, const MemoryEstimate& e, JobPlacement where,
                       const MachineMemory& machine) {
  const Placement p = Place(config, e, where, machine);
  const std::string shrink =
      "; make the model or the batch smaller (model.d_model, model.d_ff, model.layers, "
      "batching.src_tokens_per_step, batching.tgt_tokens_per_step)";
  if (machine.host_bytes > 0 && p.host_bytes > machine.host_bytes) {
    std::string roles;
    if (where == JobPlacement::kLocal) {
      roles = "train --local (parameters, gradient, Adam moments, activations)";
    } else if (where == JobPlacement::kClusterRank) {
      roles = "one rank's role (server shard " + FormatBytes(e.server_bytes) + ", worker " +
              FormatBytes(p.worker_bytes) + ")";
    } else {
      roles = std::to_string(p.servers) + " server(s) of " + FormatBytes(e.server_bytes) + " and " +
              std::to_string(p.workers) + " worker(s) of " + FormatBytes(p.worker_bytes);
    }
    return Status::InvalidArgument(
        "the job does not fit this machine: " + roles + " need at least " + FormatBytes(p.host_bytes) +
        " of memory, this machine has " + FormatBytes(machine.host_bytes) + " (" + std::to_string(e.parameters) +
        " parameters)" + shrink + (where == JobPlacement::kLocal ? "" : ", or add cluster.servers"));
  }
  if (p.gpu_workers && machine.gpu_bytes > 0 && e.worker_compute_bytes > machine.gpu_bytes) {
    return Status::InvalidArgument("the job does not fit the GPU: a worker needs at least " +
                                   FormatBytes(e.worker_compute_bytes) +
                                   " of GPU memory (parameters, gradient, "
                                   "activations " +
                                   FormatBytes(e.worker_activation_bytes) + "), the GPU has " +
                                   FormatBytes(machine.gpu_bytes) + shrink + ", or add cluster.workers");
  }
  return Status::Ok();
}

}  // namespace psformer
