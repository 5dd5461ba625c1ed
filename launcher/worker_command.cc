// `psformer worker`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunWorkerCommand(const Args& args) {
  po::options_description options("worker options");
  ParsedOptions parsed = ParseOptions("worker", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("worker", "this subcommand is not built yet");
}

}  // namespace psformer
