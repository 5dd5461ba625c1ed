// `psformer prepare`: learn the joint SentencePiece BPE vocabulary and binarize a parallel
// corpus for training (worker/data/corpus_preparer.h does the work).
#include <iostream>
#include <memory>
#include <thread>

#include "common/interrupt_cleanup.h"
#include "launcher/command_line.h"
#include "launcher/terminal_progress.h"
#include "worker/data/corpus_preparer.h"

namespace psformer {

int RunPrepareCommand(const Args& args) {
  PrepareOptions defaults;
  po::options_description options("prepare options");
  // clang-format off
  options.add_options()
      ("src", po::value<std::string>()->required(), "source side of the training corpus, one sentence a line (UTF-8)")
      ("tgt", po::value<std::string>()->required(), "target side, line by line the translations of --src")
      ("out", po::value<std::string>()->required(),
       "output directory, must not exist yet: spm.model, train.bin, valid.bin, report.txt")
      ("vocab-size", po::value<int>()->default_value(defaults.vocab_size),
       "pieces of the learnt joint BPE vocabulary (reserved ids pad 0, bos 1, eos 2, unk 3 included)")
      ("spm", po::value<std::string>(), "use this SentencePiece model instead of learning one")
      ("max-length", po::value<int>()->default_value(defaults.max_length),
       "drop pairs with a side longer than this many pieces")
      ("max-length-ratio", po::value<double>()->default_value(defaults.max_length_ratio, ShortestText(defaults.max_length_ratio)),
       "drop pairs whose longer side exceeds this many times the shorter")
      ("valid-src", po::value<std::string>(), "source side of the validation corpus (with --valid-tgt)")
      ("valid-tgt", po::value<std::string>(), "target side of the validation corpus");
  // clang-format on
  ParsedOptions parsed = ParseOptions("prepare", "--src FILE --tgt FILE --out DIR [options]", args, options);
  if (parsed.exit_status) return *parsed.exit_status;
  RemoveTemporariesOnInterrupt("prepare");  // a stop leaves no unfinished file
  const auto& values = parsed.values;
  auto text = [&values](const char* name) {
    return values.count(name) ? values[name].as<std::string>() : std::string();
  };
  PrepareOptions prepare;
  prepare.src_path = text("src");
  prepare.tgt_path = text("tgt");
  prepare.out_dir = text("out");
  prepare.spm_model = text("spm");
  prepare.valid_src_path = text("valid-src");
  prepare.valid_tgt_path = text("valid-tgt");
  prepare.vocab_size = values["vocab-size"].as<int>();
  prepare.max_length = values["max-length"].as<int>();
  prepare.max_length_ratio = values["max-length-ratio"].as<double>();
  prepare.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (values.count("spm") && !values["vocab-size"].defaulted()) {
    return ReportError("prepare", "--vocab-size and --spm exclude each other: the model fixes the vocabulary",
                       kExitUsage);
  }

  // Options that contradict each other or lack a value are usage errors, like the parser's own.
  if (Status valid = CheckPrepareOptions(prepare); !valid.ok()) {
    return ReportError("prepare", valid.message() + " (see --help)", kExitUsage);
  }

  // One meter per split, on a terminal only; learning the vocabulary has none (SentencePiece's
  // trainer reports nothing as it goes).
  std::unique_ptr<TerminalProgress> progress;
  std::string progress_split;
  prepare.progress = [&](const std::string& split, int64_t done, int64_t total) {
    if (split != progress_split) {
      progress = std::make_unique<TerminalProgress>("prepare", total, split);
      progress_split = split;
    }
    progress->Update(done);
  };
  auto report = PrepareCorpus(prepare);
  progress.reset();
  if (!report.ok()) return ReportError("prepare", report.status());
  std::cout << FormatPrepareReport(*report, prepare) << "wrote " << prepare.out_dir << "\n";
  return 0;
}

}  // namespace psformer
