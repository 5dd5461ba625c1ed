#include "launcher/cluster_plan.h"

#include <algorithm>
#include <map>

#include "common/host_groups.h"

namespace psformer {

Status ClusterPlan::CheckRanks(int ranks, int servers, int workers) {
  if (RanksFit(ranks, servers, workers)) return Status::Ok();
  if (workers == 0) {
    return Status::InvalidArgument("cluster.workers = 0 makes every rank that is not a server a worker, but " +
                                   std::to_string(ranks) + " rank(s) leave none beside cluster.servers (" +
                                   std::to_string(servers) + "); start more ranks (mpirun -np)");
  }
  const int needed = servers + workers;
  return Status::InvalidArgument(std::to_string(ranks) +
                                 " processes were started but the config needs cluster.servers (" +
                                 std::to_string(servers) + ") + cluster.workers (" + std::to_string(workers) +
                                 ") = " + std::to_string(needed) + "; start " + std::to_string(needed) +
                                 " ranks (mpirun -np " + std::to_string(needed) + ") or change the config with --set");
}

StatusOr<ClusterPlan> ClusterPlan::Make(const ClusterPlanOptions& options, const std::vector<std::string>& hosts) {
  PSF_RETURN_IF_ERROR(CheckRanks(static_cast<int>(hosts.size()), options.servers, options.workers));
  ClusterPlan plan;
  plan.slots_.resize(hosts.size());
  // Hosts in order of first appearance, each with its slots in order.
  std::vector<std::string> host_order;
  std::map<std::string, std::vector<int>> host_slots;
  for (int i = 0; i < static_cast<int>(hosts.size()); ++i) {
    if (host_slots.find(hosts[i]) == host_slots.end()) host_order.push_back(hosts[i]);
    host_slots[hosts[i]].push_back(i);
    plan.slots_[i].slot = i;
    plan.slots_[i].host = hosts[i];
  }
  plan.host_count_ = static_cast<int>(host_order.size());

  // Servers round-robin over hosts, each taking its host's highest free slot, so that
  // workers keep the low local ranks (and GPU numbers line up with local ranks).
  std::map<std::string, int> taken_from_top;
  std::vector<bool> is_server(hosts.size(), false);
  size_t h = 0;
  for (int s = 0; s < options.servers; ++s) {
    for (size_t tries = 0; tries < host_order.size(); ++tries, ++h) {
      const std::string& host = host_order[h % host_order.size()];
      const auto& slots = host_slots[host];
      if (taken_from_top[host] < static_cast<int>(slots.size())) {
        const int slot = slots[slots.size() - 1 - taken_from_top[host]++];
        is_server[slot] = true;
        plan.slots_[slot].kind = RoleSlot::Kind::kServer;
        plan.slots_[slot].index = s;
        ++h;
        break;
      }
    }
  }
  for (int s = 0; s < options.servers; ++s) plan.server_slots_.push_back(-1);
  std::map<std::string, int> gpus;
  for (const auto& [host, count] : options.gpus_per_host) gpus[host] = count;
  std::map<std::string, int> workers_on_host;
  for (int i = 0; i < static_cast<int>(hosts.size()); ++i) {
    RoleSlot& slot = plan.slots_[i];
    if (is_server[i]) {
      plan.server_slots_[slot.index] = i;
      continue;
    }
    slot.kind = RoleSlot::Kind::kWorker;
    slot.index = static_cast<int>(plan.worker_slots_.size());
    plan.worker_slots_.push_back(i);
    const int local = workers_on_host[slot.host]++;
    if (options.gpu_workers) slot.local_gpu = local;
  }
  if (options.gpu_workers) {
    for (const std::string& host : host_order) {
      const int wanted = workers_on_host[host];
      const int available = gpus.count(host) ? gpus[host] : 0;
      if (wanted > available) {
        return Status::InvalidArgument("host " + host + " would run " + std::to_string(wanted) +
                                       " GPU workers but has " + std::to_string(available) +
                                       " GPU(s) (CUDA device count); start at most " + std::to_string(available) +
                                       " workers there (cluster.workers, or fewer ranks on that host)");
      }
    }
  }
  return plan;
}

StatusOr<bool> ChooseGpuWorkers(proto::ClusterConfig::Backend backend,
                                const std::vector<std::pair<std::string, int>>& gpus_per_host) {
  if (backend == proto::ClusterConfig::CPU || backend == proto::ClusterConfig::EMULATED) return false;
  const std::pair<std::string, int>* with = nullptr;
  const std::pair<std::string, int>* without = nullptr;
  for (const auto& host : gpus_per_host) (host.second > 0 ? with : without) = &host;
  if (backend == proto::ClusterConfig::CUDA) {
    if (without != nullptr) {
      return Status::InvalidArgument("cluster.backend = CUDA but host " + without->first +
                                     " has no GPU (CUDA device count 0)");
    }
    return true;
  }
  if (with != nullptr && without != nullptr) {
    return Status::InvalidArgument("cluster.backend = AUTO but host " + with->first + " has " +
                                   std::to_string(with->second) + " GPU(s) and host " + without->first +
                                   " has none; set cluster.backend to CUDA or CPU");
  }
  return with != nullptr;
}

void ReadHostReports(const std::vector<std::string>& reports, std::vector<std::string>* hosts,
                     std::vector<std::pair<std::string, int>>* gpus_per_host) {
  for (const std::string& report : reports) {
    const size_t space = report.rfind(' ');
    hosts->push_back(report.substr(0, space));
    const bool seen = std::any_of(gpus_per_host->begin(), gpus_per_host->end(),
                                  [&](const auto& h) { return h.first == hosts->back(); });
    if (!seen) gpus_per_host->emplace_back(hosts->back(), std::stoi(report.substr(space + 1)));
  }
}

Status ResolveHostGroups(const ClusterPlan& plan, proto::JobConfig* config) {
  auto& cluster = *config->mutable_cluster();
  if (!cluster.host_summing()) return Status::Ok();
  if (cluster.host_groups_size() == 0) {
    // One group per host, in worker order: a host's workers must have consecutive indices.
    std::map<std::string, int> first_worker;  // of each host seen
    for (int w = 0; w < plan.workers(); ++w) {
      const std::string& host = plan.worker(w).host;
      if (w > 0 && host == plan.worker(w - 1).host) {
        cluster.set_host_groups(cluster.host_groups_size() - 1,
                                cluster.host_groups(cluster.host_groups_size() - 1) + 1);
        continue;
      }
      if (const auto seen = first_worker.find(host); seen != first_worker.end()) {
        return Status::InvalidArgument(
            "host summing groups the workers of each host, but the ranks of host " + host +
            " are not consecutive (worker " + std::to_string(seen->second) + " and worker " + std::to_string(w) +
            " with others between them); start mpirun with --map-by slot, or set cluster.host_summing = false");
      }
      first_worker[host] = w;
      cluster.add_host_groups(1);
    }
    if (cluster.host_groups_size() < 2) cluster.clear_host_groups();  // one host: the flat path
    return Status::Ok();
  }
  const HostGroups groups = HostGroups::Of(*config);
  if (groups.workers() != plan.workers()) {
    return Status::InvalidArgument("cluster.host_groups " + groups.ToString() + " add up to " +
                                   std::to_string(groups.workers()) + " workers, but the job has " +
                                   std::to_string(plan.workers()));
  }
  for (int w = 0; w < plan.workers(); ++w) {
    const int first = groups.first(groups.GroupOf(w));
    if (plan.worker(w).host != plan.worker(first).host) {
      return Status::InvalidArgument("cluster.host_groups " + groups.ToString() + " puts worker " + std::to_string(w) +
                                     " (on " + plan.worker(w).host + ") in a group with worker " +
                                     std::to_string(first) + " (on " + plan.worker(first).host +
                                     "): a group's workers must share a host");
    }
  }
  return Status::Ok();
}

}  // namespace psformer
