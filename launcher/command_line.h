// Shared handling of subcommand options (Boost.Program_options): parsing with clear errors,
// --help text with defaults, and the error line format "psformer NAME: error: ...".
#ifndef PSFORMER_LAUNCHER_COMMAND_LINE_H_
#define PSFORMER_LAUNCHER_COMMAND_LINE_H_

#include <boost/program_options.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "launcher/commands.h"
#include "launcher/exit_codes.h"

namespace psformer {

namespace po = boost::program_options;

// Parses `args` against `options` (plus --help). Returns the parsed map, or the exit status
// to return at once: 0 after printing help, 2 after printing a usage error.
struct ParsedOptions {
  po::variables_map values;
  std::optional<int> exit_status;
};
ParsedOptions ParseOptions(const std::string& command, const std::string& usage, const Args& args,
                           const po::options_description& options,
                           const po::positional_options_description* positional = nullptr);

// The shortest text that reads back as `value` ("0.6", where Boost's own default text for an
// option's --help line would be "0.59999999999999998"): po::value<double>()->default_value(v, ShortestText(v)).
std::string ShortestText(double value);

// Flushes standard output and reports (as "psformer COMMAND: error: ...") a result that could
// not be written there: a full disk, a closed or full pipe, /dev/full. Returns `exit_status`
// when everything was written, else 1 (or `exit_status`, when that already says failure).
int CheckStandardOutput(const std::string& command, int exit_status);

// For a job's supervisor (train, launch), whose result is its run directory and whose console only
// reports: SIGPIPE is ignored from here on, so a console that closes (`| tee` ended by the same
// Ctrl-C, `| head`, a closed terminal) makes writes to it fail with EPIPE instead of killing the
// supervisor before it stopped its roles in order. Role processes and mpirun inherit it.
void KeepRunningWhenTheConsoleCloses();

// The exit status of a job whose console may have closed while it ran: `exit_status`, with the
// failed writes to standard output forgotten (the job's result is in its run directory, not
// lost), so that CheckStandardOutput does not turn a finished job into a failed one.
int JobExitStatus(int exit_status);

// Prints "psformer COMMAND: error: MESSAGE" to stderr and returns `exit_status`. When the
// current directory has been removed, the message says so (the cause of any relative path's
// "No such file or directory").
int ReportError(const std::string& command, const std::string& message, int exit_status = kExitFailure);
int ReportError(const std::string& command, const Status& status, int exit_status = kExitFailure);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_COMMAND_LINE_H_
