// `psformer prepare`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunPrepareCommand(const Args& args) {
  po::options_description options("prepare options");
  ParsedOptions parsed = ParseOptions("prepare", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("prepare", "this subcommand is not built yet");
}

}  // namespace psformer
