// `psformer translate`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunTranslateCommand(const Args& args) {
  po::options_description options("translate options");
  ParsedOptions parsed = ParseOptions("translate", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("translate", "this subcommand is not built yet");
}

}  // namespace psformer
