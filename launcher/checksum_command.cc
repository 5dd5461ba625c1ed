// `psformer checksum`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunChecksumCommand(const Args& args) {
  po::options_description options("checksum options");
  ParsedOptions parsed = ParseOptions("checksum", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("checksum", "this subcommand is not built yet");
}

}  // namespace psformer
