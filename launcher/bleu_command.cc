// `psformer bleu`. Not built yet: it says so and exits non-zero.
#include "launcher/command_line.h"

namespace psformer {

int RunBleuCommand(const Args& args) {
  po::options_description options("bleu options");
  ParsedOptions parsed = ParseOptions("bleu", "[options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  return ReportError("bleu", "this subcommand is not built yet");
}

}  // namespace psformer
