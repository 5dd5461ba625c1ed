// libFuzzer target for the reader of supervisor log lines (launcher/supervisor_log.h) that
// `psformer status` runs on logs/supervisor*.log. Nothing may crash or hit undefined behaviour
// whatever the line; an event names a role of the form worker-N or pserver-N. Built and run by
// scripts/fuzz supervisor_log; seeds in fuzz/seeds/supervisor_log/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "launcher/supervisor_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace psformer;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const auto event = ParseSupervisorLogLine(line);
  if (!event) return 0;
  const std::string& role = event->role;
  if (role.rfind("worker-", 0) != 0 && role.rfind("pserver-", 0) != 0) std::abort();
  if (event->kind == RoleLogEvent::Kind::kStarted && (event->pid < 0 || event->incarnation < 0)) std::abort();
  if (event->detail.size() > size) std::abort();
  return 0;
}
