// The hosts a cluster job may run on, as Open MPI's hostfile lists them ("HOST [slots=N]" a
// line, # comments), and the choice among them of the hosts a launch uses: the first ones, in
// file order, that answer, until their slots hold every process; the rest are spares.
#ifndef PSFORMER_LAUNCHER_HOSTFILE_H_
#define PSFORMER_LAUNCHER_HOSTFILE_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

// More processes than this on one host is a typing mistake, not a host.
inline constexpr int kMaxSlotsPerHost = 4096;

struct HostSlots {
  std::string host;
  int slots = 1;  // processes this host takes (Open MPI's default for a line without slots=)
};

// Parses hostfile text; `source` names it in errors ("FILE:LINE: ..."). Fails on a malformed
// line, a count out of 1..kMaxSlotsPerHost, max_slots=N without slots=N (or below it), a host
// listed twice, and a file without hosts.
StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& source);
StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path);

// The hosts for `processes` processes: `hosts` in order, leaving out those whose `answers` entry
// is false, until the slots suffice (the last host taken may be used in part). Fails, saying how
// many slots answer and how many are needed, and which hosts did not answer (with `why`, when
// given: ProbeHosts's reasons), when too few do.
StatusOr<std::vector<HostSlots>> SelectHosts(const std::vector<HostSlots>& hosts, const std::vector<bool>& answers,
                                             int processes, const std::vector<std::string>& why = {});

// "b, c" or, with reasons, "b: why; c: why": the hosts whose `answers` entry is false.
std::string SilentHosts(const std::vector<std::string>& hosts, const std::vector<bool>& answers,
                        const std::vector<std::string>& why = {});

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_HOSTFILE_H_
