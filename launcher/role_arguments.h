// The command line of a role process, `psformer worker|pserver|aggregator ...`, spelled in
// one place: the supervisor writes it (RoleArguments::ToArgs), and the role commands declare and
// read their options from the same definitions (AddRoleOptions, ReadRoleArguments), so the two
// sides cannot drift apart.
#ifndef PSFORMER_LAUNCHER_ROLE_ARGUMENTS_H_
#define PSFORMER_LAUNCHER_ROLE_ARGUMENTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config_loader.h"
#include "launcher/cluster_plan.h"
#include "launcher/command_line.h"

namespace psformer {

// The option a supervisor appends, with the restart count, to every start of a role
// (launcher/role_process.h); declared by AddRoleOptions like the others.
inline constexpr char kIncarnationOption[] = "--incarnation";

struct RoleArguments {
  RoleSlot::Kind kind = RoleSlot::Kind::kWorker;
  std::string config;                // --config: the run's resolved config (RUN_DIR/config.pbtxt)
  std::string run_dir;               // --run-dir
  int index = 0;                     // --index: the shard, the worker, or the host group
  std::string endpoint;              // --endpoint, servers and aggregators: where to listen
  std::string ipc_endpoint;          // --ipc-endpoint, servers: ipc:// for same-host workers; "" = none
  std::vector<std::string> servers;  // --servers, workers and aggregators: the servers' endpoints in shard order
  std::string aggregator;            // --aggregator, workers: their host group's aggregator; "" = none
  uint64_t job_id = 0;               // --job-id: shared by every process of the job
  uint32_t incarnation = 0;          // --incarnation: restart count, appended by the supervisor
  int gpu = -1;                      // --gpu, workers: CUDA device ordinal; -1 = CPU backend
  int threads = 0;                   // --threads: for passes over payloads; 0 = cluster.threads_per_process
  bool resume = false;               // --resume

  // The arguments after the executable: the role's name, then its options (--incarnation left
  // to the supervisor; --gpu, --threads and --resume only when they differ from the default).
  std::vector<std::string> ToArgs() const;
};

// The synopsis of the role's --help and usage errors.
std::string RoleUsage(RoleSlot::Kind kind);
// Declares the options of role `kind` (the ones its RoleArguments fields name) in `options`.
void AddRoleOptions(RoleSlot::Kind kind, po::options_description& options);
// The arguments parsed with the options of AddRoleOptions. REQUIRES: `values` was parsed (and
// notified) with them; Boost has then checked that the required ones are there.
RoleArguments ReadRoleArguments(RoleSlot::Kind kind, const po::variables_map& values);

// What a role command starts from: its arguments and the job's config, or the exit status to
// return at once (after --help, or after saying what was wrong: a usage error, a config that
// cannot be read, an --index outside the config's cluster.servers or cluster.workers, a server or
// aggregator given a config whose vocabulary size is not resolved, a malformed
// PSFORMER_TRACE_STEPS). On the way it sets up what is the process's own: the threads of its
// passes over payloads (SetPayloadThreads, from --threads) and its trace (Trace::Configure; the
// command calls Trace::Finish when it ends).
struct RoleCommandLine {
  RoleArguments arguments;
  JobConfig config;
  int vocab = 0;  // the resolved model.vocab_size (0 for a worker, which may take it from the data)
  std::optional<int> exit_status;
};
RoleCommandLine ParseRoleCommandLine(RoleSlot::Kind kind, const Args& args);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_ROLE_ARGUMENTS_H_
