// `psformer checksum FILE`: the SHA-256 of a model file's parameter bytes (the fp32 values as
// stored, in layout order), so two runs can be shown to end with identical weights.
// Prints "<hex digest>  <count> parameters  <file>".
#include <iostream>

#include "common/model_file.h"
#include "common/sha256.h"
#include "launcher/command_line.h"

namespace psformer {

int RunChecksumCommand(const Args& args) {
  po::options_description options("checksum options");
  options.add_options()("file", po::value<std::string>()->required(), "a model file (RUN_DIR/model.bin)");
  po::positional_options_description positional;
  positional.add("file", 1);
  ParsedOptions parsed = ParseOptions("checksum", "FILE", args, options, &positional);
  if (parsed.exit_status) return *parsed.exit_status;
  const std::string path = parsed.values["file"].as<std::string>();
  auto model = ReadModelFile(path);
  if (!model.ok()) return ReportError("checksum", model.status());
  const std::string digest = Sha256Hex(model->params.data(), model->params.size() * sizeof(float));
  std::cout << digest << "  " << model->params.size() << " parameters  " << path << "\n";
  return 0;
}

}  // namespace psformer
