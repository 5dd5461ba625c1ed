#include "common/transport/host_identity.h"

#include <sys/stat.h>

#include <fstream>

namespace psformer {

std::string SameHostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(in, boot_id) || boot_id.empty()) return "";
  struct stat netns {};
  if (stat("/proc/self/ns/net", &netns) != 0) return "";
  return boot_id + "/" + std::to_string(static_cast<unsigned long long>(netns.st_ino));
}

bool SameHost(const std::string& a, const std::string& b) { return !a.empty() && a == b; }

}  // namespace psformer
