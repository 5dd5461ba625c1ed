// `psformer bleu`: corpus BLEU of a hypothesis file against one or more reference files, printed
// as sacreBLEU's text line (translate/bleu.h). Nothing is printed to stdout unless every file
// reads and lines up.
#include <iostream>

#include "common/text_lines.h"
#include "launcher/command_line.h"
#include "worker/translate/bleu.h"

namespace psformer {

int RunBleuCommand(const Args& args) {
  po::options_description options("bleu options");
  // clang-format off
  options.add_options()
      ("hyp", po::value<std::string>()->required(), "hypotheses, one detokenized sentence a line (UTF-8)")
      ("ref", po::value<std::vector<std::string>>()->composing(),
       "references, line-aligned with --hyp (repeat for several references per sentence)");
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
  auto hyps = ReadUtf8Lines(hyp_path, CarriageReturn::kKeep);
  if (!hyps.ok()) return ReportError("bleu", hyps.status());
  // sacreBLEU refuses an empty corpus too; a score of 0 would hide a failed translation run.
  if (hyps->empty()) return ReportError("bleu", hyp_path + " is empty: no hypotheses to score");
  std::vector<std::vector<std::string>> refs;
  for (const std::string& path : ref_paths) {
    auto lines = ReadUtf8Lines(path, CarriageReturn::kKeep);
    if (!lines.ok()) return ReportError("bleu", lines.status());
    if (lines->size() != hyps->size()) {
      return ReportError("bleu", "line counts differ: " + hyp_path + " has " + std::to_string(hyps->size()) +
                                     " lines but " + path + " has " + std::to_string(lines->size()));
    }
    refs.push_back(std::move(lines).value());
  }
  auto score = CorpusBleu(*hyps, refs);
  if (!score.ok()) return ReportError("bleu", score.status());
  std::cout << FormatBleuLine(*score) << "\n";
  return 0;
}

}  // namespace psformer
