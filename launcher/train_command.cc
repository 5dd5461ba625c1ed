// `psformer train`: resolve the config, then train. Today this runs the local single-process
// trainer (worker/train/local_trainer.h); the parameter servers will go under it later.
#include <ctime>
#include <iostream>

#include "common/config_loader.h"
#include "common/logging.h"
#include "launcher/command_line.h"
#include "worker/train/local_trainer.h"

namespace psformer {
namespace {

// runs/<config name>-<UTC time>, as DESIGN.md names the default run directory.
std::string DefaultRunDir(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  return "runs/" + name + "-" + stamp;
}

}  // namespace

int RunTrainCommand(const Args& args) {
  po::options_description options("train options");
  // clang-format off
  options.add_options()
      ("config", po::value<std::string>()->required(), "job config, protobuf text format (configs/*.pbtxt)")
      ("set", po::value<std::vector<std::string>>()->composing(),
       "override one field, field.path=value (repeatable), e.g. --set model.heads=16")
      ("run-dir", po::value<std::string>(), "run directory (default runs/<config name>-<time>)")
      ("resume", po::bool_switch(), "continue from the saved trainer state in --run-dir")
      ("dry-run", po::bool_switch(), "validate, print the resolved config and exit");
  // clang-format on
  ParsedOptions parsed = ParseOptions("train", "--config FILE [--set field=value ...] [--run-dir DIR]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  const auto& values = parsed.values;

  std::vector<std::string> overrides;
  if (values.count("set")) overrides = values["set"].as<std::vector<std::string>>();
  auto config = ResolveConfig(values["config"].as<std::string>(), overrides);
  if (!config.ok()) return ReportError("train", config.status());
  const Status files = CheckConfigFiles(*config);
  if (values["dry-run"].as<bool>()) {
    std::cout << ConfigToText(*config);
    if (!files.ok()) std::cerr << "psformer train: warning: " << files.message() << "\n";
    return 0;
  }
  if (!files.ok()) return ReportError("train", files);
  const bool resume = values["resume"].as<bool>();
  if (resume && !values.count("run-dir")) {
    return ReportError("train", "--resume needs --run-dir: the run directory to continue", 2);
  }
  TrainOptions train;
  train.run_dir = values.count("run-dir") ? values["run-dir"].as<std::string>() : DefaultRunDir(config->name());
  train.resume = resume;
  SetLogTag("train");
  SetLogLevel(static_cast<LogLevel>(config->logging().level()));
  const Status status = RunLocalTraining(*config, train);
  if (!status.ok()) return ReportError("train", status);
  std::cout << "trained " << config->name() << ": " << train.run_dir << "/model.bin\n";
  return 0;
}

}  // namespace psformer
