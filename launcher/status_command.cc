// `psformer status RUN_DIR [--watch SECONDS | --verify]`: one screen about a training run
// (launcher/run_status.h), redrawn every SECONDS with --watch until the job is no longer running or
// Ctrl-C; with --verify, its checkpoints read whole and checked as a resume checks them.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "launcher/command_line.h"
#include "launcher/run_status.h"

namespace psformer {

namespace {

// "--watch -1" reaches the parser as --watch without a value and an unknown option "-1" (the value
// is optional): a negative number after --watch is named here instead.
bool IsNegativeNumber(const std::string& text) {
  if (text.size() < 2 || text[0] != '-') return false;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

}  // namespace

int RunStatusCommand(const Args& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--watch" && IsNegativeNumber(args[i + 1])) {
      return ReportError("status", "--watch " + args[i + 1] + ": must be a number of seconds > 0", kExitUsage);
    }
  }
  po::options_description options("status options");
  // clang-format off
  options.add_options()
      ("run-dir", po::value<std::string>()->required(), "the run directory (also the first positional argument)")
      ("watch", po::value<double>()->implicit_value(2.0),
       "redraw every SECONDS (default 2) while the job runs")
      ("verify", po::bool_switch(),
       "read the checkpoints (and model.bin) whole and check their CRC-32Cs as train --resume does (without "
       "it: their sizes); exit status 1 when it finds damage");
  // clang-format on
  po::positional_options_description positional;
  positional.add("run-dir", 1);
  ParsedOptions parsed = ParseOptions("status", "RUN_DIR [--watch [SECONDS] | --verify]", args, options, &positional);
  if (parsed.exit_status) return *parsed.exit_status;
  const std::string run_dir = parsed.values["run-dir"].as<std::string>();
  const bool watch = parsed.values.count("watch") > 0;
  const double every = watch ? parsed.values["watch"].as<double>() : 0.0;
  if (watch && !(every > 0 && std::isfinite(every)))
    return ReportError("status", "--watch " + ShortestText(every) + ": must be a number of seconds > 0", kExitUsage);
  const bool verify = parsed.values["verify"].as<bool>();
  if (watch && verify) {
    return ReportError("status",
                       "--verify reads every checkpoint file, too much to redraw every few seconds: "
                       "give --watch or --verify, not both",
                       kExitUsage);
  }
  const bool terminal = isatty(STDOUT_FILENO);
  while (true) {
    auto status = ReadRunStatus(run_dir, verify);
    if (!status.ok()) return ReportError("status", status.status());
    // On a terminal each screen replaces the last (clear, cursor home); in a pipe they follow.
    if (watch && terminal) std::cout << "\033[H\033[2J";
    std::cout << FormatRunStatus(*status) << std::flush;
    if (verify) {
      // A check, as a script uses it (`status RUN --verify && deploy`): damage it found is no
      // success. Checkpoints a running job is still writing are not damage.
      const bool damaged = !status->model_damage.empty() || !status->trainer_state_damage.empty() ||
                           !status->damaged_checkpoints.empty();
      if (damaged) {
        std::cerr << "psformer status: --verify found damage in " << run_dir << " (listed above)\n";
        return kExitFailure;
      }
      return 0;
    }
    if (!watch || status->state != RunStatus::State::kRunning) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(every));
    if (!terminal) std::cout << "\n";
  }
}

}  // namespace psformer
