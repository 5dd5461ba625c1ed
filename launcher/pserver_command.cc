// `psformer pserver`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunPserverCommand(const Args& args) {
  po::options_description options("pserver options");
  ParsedOptions parsed = ParseOptions("pserver", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("pserver", "this subcommand is not built yet");
}

}  // namespace psformer
