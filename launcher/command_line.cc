#include "launcher/command_line.h"

#include <limits.h>
#include <signal.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <system_error>
#include <vector>

namespace psformer {

namespace {

// Where a word that no option took stands: the hidden option that collects such words (Boost's own
// error, "too many positional options have been specified", names neither the word nor a fix).
constexpr const char* kStrayWords = "psf-stray-words";

// "unexpected argument 'W'", with the option a newcomer most likely left out where the word looks
// like its value and that option is not `given` already (`psformer train configs/copy.pbtxt`).
std::string StrayWordError(const po::options_description& options, const po::variables_map& given,
                           bool takes_positional, const std::string& word) {
  std::string text = "unexpected argument '" + word + "'";
  const auto takes = [&](const char* name) {
    return options.find_nothrow(name, false) != nullptr && given.count(name) == 0;
  };
  const auto ends_with = [&](const char* end) { return word.ends_with(end); };
  std::string option;
  std::error_code ec;
  if (takes("config") && ends_with(".pbtxt")) {
    option = "--config";
  } else if (takes("model") && ends_with(".bin")) {
    option = "--model";
  } else if (takes("run-dir") && std::filesystem::is_directory(word, ec)) {
    option = "--run-dir";
  }
  if (!option.empty()) return text + " (did you mean " + option + " " + word + "?)";
  if (word.starts_with("-") || takes_positional) return text;
  return text + ": every argument goes with an option";
}

}  // namespace

ParsedOptions ParseOptions(const std::string& command, const std::string& usage, const Args& args,
                           const po::options_description& options,
                           const po::positional_options_description* positional) {
  po::options_description all;
  all.add(options);
  all.add_options()("help,h", "print this help and exit");
  ParsedOptions parsed;
  try {
    // Without a positional description, stray words would be ignored silently; here they are
    // collected after the command's own positional arguments, and refused by name below.
    po::options_description parsing;
    parsing.add(all);
    parsing.add_options()(kStrayWords, po::value<std::vector<std::string>>());
    po::positional_options_description words =
        positional != nullptr ? *positional : po::positional_options_description();
    if (words.max_total_count() != std::numeric_limits<unsigned>::max()) words.add(kStrayWords, -1);
    po::command_line_parser parser(args);
    parser.options(parsing);
    parser.positional(words);
    po::store(parser.run(), parsed.values);
    if (parsed.values.count(kStrayWords)) {
      const std::string word = parsed.values[kStrayWords].as<std::vector<std::string>>().front();
      std::cerr << "psformer " << command << ": error: "
                << StrayWordError(options, parsed.values, positional != nullptr && positional->max_total_count() > 0,
                                  word)
                << "\n"
                << "usage: psformer " << command << " " << usage << "  (see --help)\n";
      parsed.exit_status = kExitUsage;
      return parsed;
    }
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
