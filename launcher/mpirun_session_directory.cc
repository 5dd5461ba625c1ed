#include "launcher/mpirun_session_directory.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace psformer {
namespace {

std::vector<std::string> Bases() {
  std::vector<std::string> bases;
  for (const char* name : {"OMPI_MCA_orte_local_tmpdir_base", "OMPI_MCA_orte_tmpdir_base", "TMPDIR", "TEMP", "TMP"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && value[0] != '\0') bases.emplace_back(value);
  }
  bases.emplace_back("/tmp");
  return bases;
}

std::vector<std::string> HostNames() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return {};
  std::vector<std::string> names = {name};
  const std::string full = name;
  const size_t dot = full.find('.');
  if (dot != std::string::npos && dot > 0) names.push_back(full.substr(0, dot));
  return names;
}

// The pid on the second line of DIRECTORY/contact.txt, or -1.
long long ContactPid(const std::filesystem::path& directory) {
  std::ifstream contact(directory / "contact.txt");
  std::string uri, pid;
  if (!std::getline(contact, uri) || !std::getline(contact, pid) || pid.empty()) return -1;
  if (!std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stoll(pid);
}

}  // namespace

std::vector<std::string> MpirunSessionDirectoryCandidates(pid_t pid) {
  std::vector<std::string> candidates;
  std::string tail = ".";
  tail += std::to_string(getuid());
  tail += "/pid.";
  tail += std::to_string(pid);
  for (const std::string& base : Bases()) {
    for (const std::string& host : HostNames()) {
      const std::string path = base + "/ompi." + host + tail;
      if (std::find(candidates.begin(), candidates.end(), path) == candidates.end()) candidates.push_back(path);
    }
  }
  return candidates;
}

std::string RemoveKilledMpirunSessionDirectory(pid_t pid) {
  for (const std::string& candidate : MpirunSessionDirectoryCandidates(pid)) {
    const std::filesystem::path directory(candidate);
    std::error_code ec;
    if (!std::filesystem::is_directory(std::filesystem::symlink_status(directory, ec)) ||
        ContactPid(directory) != pid) {
      continue;
    }
    std::filesystem::remove_all(directory, ec);
    if (ec) return "";
    std::filesystem::remove(directory.parent_path(), ec);  // only when empty: other mpiruns' stay
    return candidate;
  }
  return "";
}

}  // namespace psformer
