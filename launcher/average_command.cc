// `psformer average`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunAverageCommand(const Args& args) {
  po::options_description options("average options");
  ParsedOptions parsed = ParseOptions("average", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("average", "this subcommand is not built yet");
}

}  // namespace psformer
