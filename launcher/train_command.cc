// `psformer train`: resolve the config, then train: under mpirun as one rank of a cluster, else
// in single-node mode (servers and workers on this machine, each under a supervisor), or with
// --local in this one process without servers (worker/train/local_trainer.h).
#include <unistd.h>

#include <ctime>
#include <iostream>

#include "common/config_loader.h"
#include "common/logging.h"
#include "launcher/command_line.h"
#include "launcher/job_runner.h"
#include "launcher/mpi_bootstrap.h"
#include "worker/data/batch_source.h"
#include "worker/train/local_trainer.h"

namespace psformer {
int RunTrainCommand(const Args& args) {
  po::options_description options("train options");
  // clang-format off
  options.add_options()
      ("config", po::value<std::string>()->required(), "job config, protobuf text format (configs/*.pbtxt)")
      ("set", po::value<std::vector<std::string>>()->composing(),
       "override one field, field.path=value (repeatable), e.g. --set model.heads=16")
      ("run-dir", po::value<std::string>(), "run directory (default runs/<config name>-<time>)")
      ("resume", po::bool_switch(), "continue from the last complete checkpoint in --run-dir")
      ("local", po::bool_switch(), "train in this process, without parameter servers (debugging, tests)")
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
  const std::string run_dir =
      values.count("run-dir") ? values["run-dir"].as<std::string>() : DefaultRunDir(*config);
  SetLogTag("train");
  SetLogLevel(static_cast<LogLevel>(config->logging().level()));
  if (values["local"].as<bool>()) {
    TrainOptions train;
    train.run_dir = run_dir;
    train.resume = resume;
    const Status status = RunLocalTraining(*config, train);
    if (!status.ok()) return ReportError("train", status);
    std::cout << "trained " << config->name() << ": " << run_dir << "/model.bin\n";
    return 0;
  }
  // Role processes get the vocabulary size in their config, so servers need not read the data.
  if (config->model().vocab_size() == 0) {
    auto source = MakeBatchSource(*config);
    if (!source.ok()) return ReportError("train", source.status());
    config->mutable_model()->set_vocab_size((*source)->vocab_size());
  }
  JobOptions job;
  job.config = *config;
  job.run_dir = run_dir;
  job.resume = resume;
  job.executable = "/proc/self/exe";
  char path[4096];
  const ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (len > 0) job.executable.assign(path, len);
  const int status = StartedByMpirun() ? RunClusterRank(job) : RunSingleNode(job);
  if (status == 0 && !StartedByMpirun()) std::cout << "trained " << config->name() << ": " << run_dir << "/model.bin\n";
  return status;
}

}  // namespace psformer
