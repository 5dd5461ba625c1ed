// `psformer export`: writes a model file (psformer train's model.bin or psformer average's output)
// and its SentencePiece model as a directory that another library loads. The one format so far is
// `hf`: transformers' MarianMTModel (POST_LN models) or PegasusForConditionalGeneration (PRE_LN
// models), and MarianTokenizer (export/marian_export.h, docs/export.md).
// Nothing is written unless all of it can be: the directory appears whole or not at all.
#include <iomanip>
#include <iostream>

#include "common/interrupt_cleanup.h"
#include "export/marian_export.h"
#include "launcher/command_line.h"

namespace psformer {

int RunExportCommand(const Args& args) {
  po::options_description options("export options");
  MarianExportOptions marian;
  std::string format;
  // clang-format off
  options.add_options()
      ("model", po::value<std::string>(&marian.model_path)->required(),
       "model file (RUN_DIR/model.bin or psformer average's output)")
      ("spm", po::value<std::string>(),
       "SentencePiece model the model was trained with (default: the spm.model of the corpus of the run "
       "directory the model lies in)")
      ("out", po::value<std::string>(&marian.out_dir)->required(),
       "directory to write; must not exist or be empty (an existing export is not overwritten)")
      ("format", po::value<std::string>(&format)->default_value("hf"),
       "hf: transformers' MarianMTModel for POST_LN, PegasusForConditionalGeneration for PRE_LN "
       "(config.json, model.safetensors, source.spm, target.spm, vocab.json, tokenizer_config.json, "
       "generation_config.json)");
  // clang-format on
  const std::string usage = "--model M [--spm SPM] --out DIR [--format hf]";
  const po::positional_options_description no_positional;
  ParsedOptions parsed = ParseOptions("export", usage, args, options, &no_positional);
  if (parsed.exit_status) return *parsed.exit_status;
  RemoveTemporariesOnInterrupt("export");  // a stop leaves no unfinished file
  if (format != "hf") {
    return ReportError("export", "--format " + format + " is not known; the one format is hf", kExitUsage);
  }
  if (parsed.values.count("spm")) marian.spm_path = parsed.values["spm"].as<std::string>();
  auto report = ExportMarian(marian);
  if (!report.ok()) return ReportError("export", report.status());
  if (!marian.spm_path)
    std::cerr << "psformer export: --spm " << report->spm_path << " (the corpus of the model's run)\n";
  if (!report->spm_warning.empty()) std::cerr << "psformer export: warning: " << report->spm_warning << "\n";
  std::cout << "psformer export: wrote " << marian.out_dir << " (" << report->tensors << " tensors, " << std::fixed
            << std::setprecision(1) << report->bytes / (1024.0 * 1024.0) << " MiB of weights); load it with "
            << "transformers.AutoModelForSeq2SeqLM.from_pretrained (" << report->architecture
            << ") and AutoTokenizer.from_pretrained\n";
  return 0;
}

}  // namespace psformer
