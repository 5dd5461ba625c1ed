#include "launcher/commands.h"

#include <cstring>
#include <exception>
#include <iostream>

#include "common/supervisor_report.h"
#include "launcher/command_line.h"
#include "launcher/resource_failure.h"

namespace psformer {
namespace {

void PrintUsage(std::ostream& out) {
  out << "usage: psformer <command> [options]   (psformer <command> --help for its options)\n\n"
      << "Trains the Transformer of \"Attention Is All You Need\" on parameter servers.\n\ncommands:\n";
  for (const Subcommand& c : Subcommands()) {
    out << "  " << c.name << std::string(12 - std::strlen(c.name), ' ') << c.summary << "\n";
  }
}

}  // namespace

const std::vector<Subcommand>& Subcommands() {
  static const std::vector<Subcommand> kCommands = {
      {"train", "train a model (single-node, or one rank of a cluster under mpirun)", RunTrainCommand},
      {"launch", "run train on the hosts of a hostfile under mpirun, restarting it when a host is lost",
       RunLaunchCommand},
      {"worker", "run one worker role process (started by a supervisor)", RunWorkerCommand},
      {"pserver", "run one parameter-server shard (started by a supervisor)", RunPserverCommand},
      {"aggregator", "sum one host group's gradients before they cross the network (started by a supervisor)",
       RunAggregatorCommand},
      {"prepare", "learn a SentencePiece BPE model and binarize a parallel corpus", RunPrepareCommand},
      {"translate", "translate text with beam search", RunTranslateCommand},
      {"average", "average the last N checkpoints into a model file", RunAverageCommand},
      {"export", "write a model for transformers (MarianMTModel or Pegasus) and, through it, CTranslate2",
       RunExportCommand},
      {"bleu", "score translations with corpus BLEU (sacreBLEU-compatible)", RunBleuCommand},
      {"checksum", "print a digest of a model file's parameter bytes", RunChecksumCommand},
      {"status", "show a training run: its processes, progress, checkpoints and problems", RunStatusCommand},
      {"plot", "draw a run's losses, BLEU, learning rate, throughput and step times as a PNG", RunPlotCommand},
      {"version", "print the commit this psformer was built from and the libraries it runs with", RunVersionCommand},
  };
  return kCommands;
}

int RunCommandLine(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(std::cerr);
    return kExitUsage;
  }
  std::string name = argv[1];
  Args args(argv + 2, argv + argc);
  // `psformer help help` (or help --help) is `psformer help`.
  if (name == "help" && args.size() == 1 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h")) {
    args.clear();
  }
  if (name == "--help" || name == "-h" || (name == "help" && args.empty())) {
    PrintUsage(std::cout);
    return CheckStandardOutput("--help", 0);
  }
  if (name == "--version") name = "version";
  if (name == "help") {  // `psformer help train` is `psformer train --help`
    if (args.size() > 1) {
      std::cerr << "psformer help: error: one command at a time (psformer help COMMAND)\n";
      return kExitUsage;
    }
    name = args.front();
    args = {"--help"};
  }
  for (const Subcommand& c : Subcommands()) {
    if (name == c.name) {
      // A last line of defence: library code reports failures as Status, but nothing a user
      // types may end in an uncaught exception's stack trace.
      // Every command's result goes through here: one that could not be written is a failure.
      InstallTerminateHandler("psformer " + name);
      try {
        return CheckStandardOutput(name, c.run(args));
      } catch (const std::exception& e) {
        const std::string resources = OutOfResourcesMessage(e);
        return ReportError(name, resources.empty() ? e.what() : resources,
                           resources.empty() ? kExitFailure : kExitOutOfResources);
      }
    }
  }
  std::cerr << "psformer: error: unknown command '" << name << "'\n\n";
  PrintUsage(std::cerr);
  return kExitUsage;
}

}  // namespace psformer
