// libFuzzer target for the hostfile reader (launcher/hostfile.h) that `psformer launch` runs on
// --hostfile. Nothing may crash or hit undefined behaviour, whatever the text; an accepted file
// names each host once, with at least one slot, and every refusal names the file. Built and run
// by scripts/fuzz hostfile; seeds in fuzz/seeds/hostfile/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "launcher/hostfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psformer;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto hosts = ParseHostfile(text, "hosts");
  if (!hosts.ok()) {
    if (hosts.status().message().rfind("hosts", 0) != 0) std::abort();
    return 0;
  }
  std::set<std::string> seen;
  for (const HostSlots& h : *hosts) {
    if (h.host.empty() || h.slots < 1 || !seen.insert(h.host).second) std::abort();
  }
  return 0;
}
