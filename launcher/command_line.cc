#include "launcher/command_line.h"

#include <limits.h>
#include <signal.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace psformer {

ParsedOptions ParseOptions(const std::string& command, const std::string& usage, const Args& args,
                           const po::options_description& options,
                           const po::positional_options_description* positional) {
  po::options_description all;
  all.add(options);
  all.add_options()("help,h", "print this help and exit");
  ParsedOptions parsed;
  try {
    po::command_line_parser parser(args);
    parser.options(all);
    // Without a positional description, stray words would be ignored silently; an empty one
    // makes them an error ("too many positional options").
    const po::positional_options_description none;
    parser.positional(positional != nullptr ? *positional : none);
    po::store(parser.run(), parsed.values);
    if (parsed.values.count("help")) {
      std::cout << "usage: psformer " << command << " " << usage << "\n\n" << all << "\n";
      parsed.exit_status = kExitSuccess;
      return parsed;
    }
    po::notify(parsed.values);
    // An empty name ('' from a script's unset variable) would otherwise surface later as
    // "cannot open : No such file or directory", or worse, as the current directory.
    for (const auto& [name, value] : parsed.values) {
      const auto* text = boost::any_cast<std::string>(&value.value());
      if (value.defaulted() || text == nullptr || !text->empty()) continue;
      // A name that may come as the first argument (checksum FILE, status RUN_DIR) is said bare.
      const bool positional_name =
          positional != nullptr && positional->max_total_count() > 0 && name == positional->name_for_position(0);
      std::cerr << "psformer " << command << ": error: " << (positional_name ? name : "--" + name)
                << " is empty: give a name\n"
                << "usage: psformer " << command << " " << usage << "  (see --help)\n";
      parsed.exit_status = kExitUsage;
      return parsed;
    }
  } catch (const po::error& e) {
    std::cerr << "psformer " << command << ": error: " << e.what() << "\n"
              << "usage: psformer " << command << " " << usage << "  (see --help)\n";
    parsed.exit_status = kExitUsage;
  }
  return parsed;
}

std::string ShortestText(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  return error == std::errc() ? std::string(text, end) : std::to_string(value);
}

int CheckStandardOutput(const std::string& command, int exit_status) {
  errno = 0;
  std::cout.flush();
  if (std::cout.good()) return exit_status;
  // A stream that failed earlier does not flush again; stdio (under std::cout) says why.
  if (errno == 0) std::fflush(stdout);
  const int error = errno;
  std::cerr << "psformer " << command << ": error: cannot write to standard output"
            << (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) << "; the result is lost\n";
  return exit_status != kExitSuccess ? exit_status : kExitFailure;
}

void KeepRunningWhenTheConsoleCloses() { signal(SIGPIPE, SIG_IGN); }

int JobExitStatus(int exit_status) {
  if (!std::cout.good() || std::ferror(stdout)) {
    // What stdout still buffers would fail again at exit's flush: drop it.
    __fpurge(stdout);
    std::clearerr(stdout);
    std::cout.clear();
  }
  return exit_status;
}

namespace {

// A shell can stay in a directory that was removed (or renamed) under it; every relative path
// then fails with "No such file or directory", even one the command was to create. An error
// says why when that is so.
std::string RemovedWorkingDirectoryNote() {
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) != nullptr || errno != ENOENT) return "";
  return " (the current directory no longer exists: relative paths cannot be found or made from it; cd to a "
         "directory that exists)";
}

}  // namespace

int ReportError(const std::string& command, const std::string& message, int exit_status) {
  std::cerr << "psformer " << command << ": error: " << message << RemovedWorkingDirectoryNote() << "\n";
  return exit_status;
}

int ReportError(const std::string& command, const Status& status, int exit_status) {
  return ReportError(command, status.message(), exit_status);
}

}  // namespace psformer
