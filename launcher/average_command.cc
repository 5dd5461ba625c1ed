// `psformer average`: averages the parameters of the newest N complete checkpoints of a run into
// a model file that `psformer translate` and `psformer checksum` read. The model config and the
// vocabulary size come from RUN_DIR/config.pbtxt, which psformer train writes with
// model.vocab_size resolved. Checkpoints that do not verify are skipped with a log line. With
// fewer complete checkpoints than N the command fails and says how many there are, unless
// --allow-fewer is given, in which case it averages those and says so.
#include <filesystem>
#include <iostream>
#include <memory>

#include "common/checkpoint/checkpoint_average.h"
#include "common/config_loader.h"
#include "common/interrupt_cleanup.h"
#include "common/model_file.h"
#include "common/param_layout.h"
#include "common/write_file.h"
#include "launcher/command_line.h"
#include "launcher/run_files.h"
#include "launcher/terminal_progress.h"
#include "pserver/server/shard_checkpointer.h"
#include "pserver/wire/piece_table.h"

namespace psformer {
namespace fs = std::filesystem;

namespace {

// What --output may replace: an earlier model file (a second average, as scripts/demo's rerun
// makes) or a device, but neither a file of another kind (a user's) nor a file a run writes at
// the top of its directory (its trained model.bin above all, this run's or another's), which an
// average must not take the place of, whether or not the run has written it yet.
Status CheckOutput(const std::string& output, const std::string& run_dir) {
  std::error_code ec;
  // Where the bytes would go: through a link, its target.
  fs::path out(output);
  if (fs::exists(out, ec)) out = fs::canonical(out, ec);
  const std::string name = out.filename().string();
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const bool this_run = fs::equivalent(parent, run_dir, ec);
  if (IsTopLevelRunFile(name) && (this_run || fs::exists(parent / "config.pbtxt", ec))) {
    const std::string whose = this_run ? "the run's" : "the run in " + parent.string() + "'s";
    if (name == "model.bin") {
      return Status::InvalidArgument("--output " + output + " is " + whose +
                                     " trained model: average writes beside it; name another file");
    }
    return Status::InvalidArgument("--output " + output + " is a file of " + whose + " own (" + name +
                                   "): average writes beside it; name another file");
  }
  if (!fs::exists(output, ec)) return Status::Ok();
  return CheckReplaceable("--output", output, std::string_view(kModelFileMagic, sizeof(kModelFileMagic)),
                          "psformer model file");
}

}  // namespace

int RunAverageCommand(const Args& args) {
  po::options_description options("average options");
  // clang-format off
  options.add_options()
      ("run-dir", po::value<std::string>()->required(), "run directory (holds config.pbtxt and checkpoints/)")
      ("last", po::value<int>(), "number of newest complete checkpoints to average "
                                 "(default: checkpoint.average_last of the run's config)")
      ("output", po::value<std::string>()->required(), "model file to write (atomically)")
      ("allow-fewer", po::bool_switch(), "with fewer complete checkpoints than --last, average those instead of failing");
  // clang-format on
  const std::string usage = "--run-dir D [--last N] --output M";
  const po::positional_options_description no_positional;
  ParsedOptions parsed = ParseOptions("average", usage, args, options, &no_positional);
  if (parsed.exit_status) return *parsed.exit_status;
  RemoveTemporariesOnInterrupt("average");  // a stop leaves no unfinished file
  const auto& v = parsed.values;
  if (v.count("last") && v["last"].as<int>() < 1) {
    return ReportError("average", "--last must be at least 1, got " + std::to_string(v["last"].as<int>()), kExitUsage);
  }

  const std::string run_dir = v["run-dir"].as<std::string>();
  const std::string output = v["output"].as<std::string>();
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) {
    return ReportError(
        "average", "run directory " + run_dir + (fs::exists(run_dir, ec) ? " is not a directory" : " does not exist"));
  }
  const std::string config_path = (fs::path(run_dir) / "config.pbtxt").string();
  if (!fs::exists(config_path, ec)) {
    return ReportError("average", config_path + " not found: " + run_dir +
                                      " is not a run directory (psformer train writes its resolved config there)");
  }
  if (const Status usable = CheckOutput(output, run_dir); !usable.ok()) return ReportError("average", usable);
  auto config = ResolveConfig(config_path, {});
  if (!config.ok()) return ReportError("average", config.status());
  const int vocab = ResolvedVocabSize(*config);
  if (vocab <= 0) {
    return ReportError("average", "model.vocab_size is 0 in " + config_path +
                                      ": the run's resolved config must name the vocabulary size");
  }

  const int last = v.count("last") ? v["last"].as<int>() : config->checkpoint().average_last();
  const CheckpointIdentity id = JobCheckpointIdentity(*config, vocab);
  const std::string checkpoints = (fs::path(run_dir) / "checkpoints").string();
  const bool allow_fewer = v["allow-fewer"].as<bool>();
  std::string step_list;
  std::unique_ptr<TerminalProgress> progress;
  // A run still training may replace the checkpoints chosen while they are read: chosen again.
  auto chosen = [&](const std::vector<int64_t>& steps) {
    const int count = static_cast<int>(steps.size());
    if (count == 0) return Status::NotFound("no complete checkpoint in " + checkpoints);
    step_list.clear();
    for (int64_t step : steps) step_list += (step_list.empty() ? "" : ", ") + std::to_string(step);
    if (count < last) {
      const std::string found = checkpoints + " has " + std::to_string(count) + " complete checkpoint(s) (steps " +
                                step_list + "), fewer than the " + std::to_string(last) + " to average";
      if (!allow_fewer) {
        return Status::InvalidArgument(found + "; pass a smaller --last, or --allow-fewer to average those");
      }
      std::cerr << "psformer average: " << found << "; averaging those (--allow-fewer)\n";
    }
    progress = std::make_unique<TerminalProgress>("average", count, "checkpoints");
    return Status::Ok();
  };
  auto averaged = AverageNewestCheckpoints(
      run_dir, id, last, chosen, [&progress](size_t done) { progress->Update(static_cast<int64_t>(done)); },
      [&progress](const std::string& reason) {
        if (progress) progress->Finish();
        std::cerr << "psformer average: " << reason << "\n";
      });
  if (progress) progress->Finish();
  if (!averaged.ok()) return ReportError("average", averaged.status());
  const int count = static_cast<int>(averaged->steps.size());

  ModelFile model;
  model.model = config->model();
  model.vocab_size = vocab;
  // The corpus may have moved since the run: the averaged weights are still worth having.
  auto spm_digest = TrainingSentencePieceDigest(*config);
  if (spm_digest.ok()) {
    model.spm_digest = *spm_digest;
  } else {
    std::cerr << "psformer average: warning: " << spm_digest.status().message() << "; " << output
              << " records no SentencePiece model, so translate and export cannot check theirs against it\n";
  }
  // The shards' order is the servers'; the model file's is the model's.
  const ParamLayout layout(config->model(), vocab);
  model.params = JobPieceTable(*config, id.parameter_count, layout.LayerStarts()).ToModelOrder(averaged->params);
  // A 1 GB model's leftover of an average killed midway would otherwise stay for good.
  RemoveDeadWritersTemporaryFiles(output);
  const Status written = WriteModelFile(output, model);
  if (!written.ok()) return ReportError("average", written);
  std::cout << "averaged " << count << " checkpoint(s) of " << run_dir << " (steps " << step_list
            << "): " << model.params.size() << " parameters written to " << output << "\n";
  return 0;
}

}  // namespace psformer
