#include "common/transport/host_identity.h"

#include <sys/stat.h>

#include <fstream>

namespace psformer {

std::string SameHostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(in, boot_id) || boot_id.empty()) return "";
  std::string identity = boot_id;
  for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/pid", "/proc/self/ns/mnt"}) {
    struct stat st {};
    if (stat(ns, &st) != 0) return "";
    identity += '/';  // appended apart: GCC 12 reports a false -Wrestrict for "/" + std::string
    identity += std::to_string(static_cast<unsigned long long>(st.st_ino));
  }
  return identity;
}

bool SameHost(const std::string& a, const std::string& b) { return !a.empty() && a == b; }

}  // namespace psformer
