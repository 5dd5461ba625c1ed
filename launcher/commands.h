// The git-style subcommands of `psformer`. Each takes the arguments after its name and
// returns the process exit status: 0 success, 1 a failure while running, 2 a usage error.
#ifndef PSFORMER_LAUNCHER_COMMANDS_H_
#define PSFORMER_LAUNCHER_COMMANDS_H_

#include <string>
#include <vector>

namespace psformer {

using Args = std::vector<std::string>;

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const Args& args);
};

// Every subcommand, in the order `psformer --help` lists them.
const std::vector<Subcommand>& Subcommands();

// Dispatches argv[1] to its subcommand; handles --help and unknown names.
int RunCommandLine(int argc, char** argv);

int RunTrainCommand(const Args& args);
int RunLaunchCommand(const Args& args);
int RunWorkerCommand(const Args& args);
int RunPserverCommand(const Args& args);
int RunAggregatorCommand(const Args& args);
int RunPrepareCommand(const Args& args);
int RunTranslateCommand(const Args& args);
int RunAverageCommand(const Args& args);
int RunExportCommand(const Args& args);
int RunBleuCommand(const Args& args);
int RunChecksumCommand(const Args& args);
int RunStatusCommand(const Args& args);
int RunPlotCommand(const Args& args);
int RunVersionCommand(const Args& args);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_COMMANDS_H_
