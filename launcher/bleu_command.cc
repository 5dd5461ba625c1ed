// `psformer bleu`: corpus BLEU of a hypothesis file against one or more reference files, printed
// as sacreBLEU's text line (translate/bleu.h). Nothing is printed to stdout unless every file
// reads and lines up. One of the files may be "-", standard input, so that translate's output
// can be scored as it comes: `psformer translate --model M < test.en | psformer bleu --hyp -
// --ref test.es`.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "common/text_lines.h"
#include "launcher/command_line.h"
#include "worker/translate/bleu.h"

namespace psformer {
namespace {

// The name `path` goes by in messages: standard input for "-".
std::string NameOf(const std::string& path, const char* option) {
  return path == "-" ? std::string("standard input (") + option + " -)" : path;
}

StatusOr<std::vector<std::string>> ReadLines(const std::string& path, const char* option) {
  if (path != "-") return ReadUtf8Lines(path, CarriageReturn::kKeep);
  return ReadUtf8Lines(stdin, NameOf(path, option), CarriageReturn::kKeep);
}

}  // namespace

int RunBleuCommand(const Args& args) {
  po::options_description options("bleu options");
  // clang-format off
  options.add_options()
      ("hyp", po::value<std::string>()->required(),
       "hypotheses, one detokenized sentence a line (UTF-8); - reads standard input")
      ("ref", po::value<std::vector<std::string>>()->composing(),
       "references, line-aligned with --hyp (repeat for several references per sentence); one of the files "
       "may be -");
  // clang-format on
  const std::string usage = "--hyp FILE --ref FILE [--ref FILE ...]";
  // No positional arguments: an empty description makes a stray word a usage error, not ignored.
  const po::positional_options_description no_positional;
  ParsedOptions parsed = ParseOptions("bleu", usage, args, options, &no_positional);
  if (parsed.exit_status) return *parsed.exit_status;
  const auto& values = parsed.values;
  if (!values.count("ref")) {
    std::cerr << "psformer bleu: error: no reference given: add --ref FILE (repeatable)\n"
              << "usage: psformer bleu " << usage << "  (see --help)\n";
    return kExitUsage;
  }

  const std::string hyp_path = values["hyp"].as<std::string>();
  const auto ref_paths = values["ref"].as<std::vector<std::string>>();
  const auto stdin_refs = std::count(ref_paths.begin(), ref_paths.end(), "-");
  if (stdin_refs + (hyp_path == "-" ? 1 : 0) > 1) {
    std::cerr << "psformer bleu: error: standard input (-) is given for more than one file; at most one of --hyp "
                 "and the --ref files can be read from it\n"
              << "usage: psformer bleu " << usage << "  (see --help)\n";
    return kExitUsage;
  }
  const std::string hyp_name = NameOf(hyp_path, "--hyp");
  auto hyps = ReadLines(hyp_path, "--hyp");
  if (!hyps.ok()) return ReportError("bleu", hyps.status());
  // sacreBLEU refuses an empty corpus too; a score of 0 would hide a failed translation run.
  if (hyps->empty()) return ReportError("bleu", hyp_name + " is empty: no hypotheses to score");
  std::vector<std::vector<std::string>> refs;
  for (const std::string& path : ref_paths) {
    auto lines = ReadLines(path, "--ref");
    if (!lines.ok()) return ReportError("bleu", lines.status());
    if (lines->size() != hyps->size()) {
      return ReportError("bleu", "line counts differ: " + hyp_name + " has " + std::to_string(hyps->size()) +
                                     " lines but " + NameOf(path, "--ref") + " has " + std::to_string(lines->size()));
    }
    refs.push_back(std::move(lines).value());
  }
  auto score = CorpusBleu(*hyps, refs);
  if (!score.ok()) return ReportError("bleu", score.status());
  std::cout << FormatBleuLine(*score) << "\n";
  return 0;
}

}  // namespace psformer
