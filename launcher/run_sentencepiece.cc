#include "launcher/run_sentencepiece.h"

#include <filesystem>
#include <iostream>

#include "common/config_loader.h"

namespace psformer {

StatusOr<std::string> RunSentencePiece(const std::string& model_path) {
  const std::string give = "; give --spm SPM, the spm.model of the corpus the model was trained on";
  std::filesystem::path run_dir = std::filesystem::path(model_path).parent_path();
  if (run_dir.empty()) run_dir = ".";
  const std::string config_path = (run_dir / "config.pbtxt").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec)) {
    return Status::InvalidArgument("no --spm, and " + model_path +
                                   " is not in a run directory (no config.pbtxt beside it) to take it from" + give);
  }
  StatusOr<JobConfig> config = LoadConfigFile(config_path);
  if (!config.ok()) {
    return Status::InvalidArgument(
        "no --spm, and the run's config to take it from cannot be read: " + config.status().message() + give);
  }
  const std::string& train_dir = config->data().train_dir();
  if (config->data().task() == proto::DataConfig::COPY || train_dir.empty()) {
    return Status::InvalidArgument(
        "no --spm, and " + config_path +
        " trains the copy task, which has no SentencePiece model (its models copy ids, not text)");
  }
  const std::string spm_path = (std::filesystem::path(train_dir) / "spm.model").string();
  if (!std::filesystem::is_regular_file(spm_path, ec)) {
    return Status::InvalidArgument("no --spm, and the run's SentencePiece model, " + spm_path +
                                   " (data.train_dir = \"" + train_dir + "\" of " + config_path + "), is not there" +
                                   (std::filesystem::path(train_dir).is_relative()
                                        ? " (a relative train_dir is read from the current directory, as the job did)"
                                        : "") +
                                   give);
  }
  return spm_path;
}

StatusOr<std::string> SentencePieceOption(const std::string& command,
                                          const boost::program_options::variables_map& values,
                                          const std::string& model_path) {
  if (values.count("spm")) return values["spm"].as<std::string>();
  PSF_ASSIGN_OR_RETURN(std::string spm_path, RunSentencePiece(model_path));
  std::cerr << "psformer " << command << ": --spm " << spm_path << " (the corpus of the model's run)\n";
  return spm_path;
}

}  // namespace psformer
