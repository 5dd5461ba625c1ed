#include "common/supervisor_report.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace psformer {
namespace {

// Set once, never cleared: a fatal report is the last thing a role says.
std::atomic<bool> g_fatal_sent{false};

}  // namespace

bool FatalReportSent() { return g_fatal_sent.load(); }

void ReportToSupervisor(std::string_view kind, std::string_view text) {
  if (kind == kReportFatal) g_fatal_sent.store(true);
  const char* fd_text = std::getenv("PSFORMER_HEARTBEAT_FD");
  if (fd_text == nullptr) return;
  const int fd = std::atoi(fd_text);
  if (fd < 0) return;
  // PIPE_BUF (4096 bytes on Linux, the only system the supervisor runs on) is what one write
  // keeps whole.
  constexpr size_t kMaxLine = 4000;
  std::string line(kind.substr(0, kMaxLine / 2));
  if (!text.empty()) {
    line += ' ';
    line.append(text.substr(0, kMaxLine - line.size() - 1));
  }
  std::replace(line.begin(), line.end(), '\n', ' ');
  line += '\n';
  // A supervisor gone or not reading: nothing more this process can do about it.
  [[maybe_unused]] const ssize_t n = write(fd, line.data(), line.size());
}

}  // namespace psformer
