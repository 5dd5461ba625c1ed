// `psformer checksum FILE`: the SHA-256 of a model file's parameter bytes (the fp32 values as
// stored, in layout order), so two runs can be shown to end with identical weights.
// Prints "<hex digest>  <count> parameters  <file>".
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/model_file.h"
#include "common/sha256.h"
#include "launcher/command_line.h"

namespace psformer {
namespace {

// What `path` is when it is a checkpoint's directory or shard file (an easy mistake: both hold
// parameters), or "" otherwise.
std::string CheckpointKind(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return std::filesystem::exists(std::filesystem::path(path) / "manifest.pbtxt", ec) ? "a checkpoint directory" : "";
  }
  char magic[8] = {};
  std::ifstream(path, std::ios::binary).read(magic, sizeof(magic));
  return std::string(magic, sizeof(magic)) == "PSFSHARD" ? "a checkpoint's shard file" : "";
}

}  // namespace

int RunChecksumCommand(const Args& args) {
  po::options_description options("checksum options");
  options.add_options()("file", po::value<std::string>()->required(), "a model file (RUN_DIR/model.bin)");
  po::positional_options_description positional;
  positional.add("file", 1);
  ParsedOptions parsed = ParseOptions("checksum", "FILE", args, options, &positional);
  if (parsed.exit_status) return *parsed.exit_status;
  const std::string path = parsed.values["file"].as<std::string>();
  if (const std::string kind = CheckpointKind(path); !kind.empty()) {
    return ReportError("checksum", path + " is " + kind +
                                       ", not a model file; psformer average --run-dir RUN_DIR "
                                       "--last 1 --output FILE writes the newest checkpoint of a run as one");
  }
  auto model = ReadModelFile(path);
  if (!model.ok()) return ReportError("checksum", model.status());
  const std::string digest = Sha256Hex(model->params.data(), model->params.size() * sizeof(float));
  std::cout << digest << "  " << model->params.size() << " parameters  " << path << "\n";
  return 0;
}

}  // namespace psformer
