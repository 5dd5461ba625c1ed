// `psformer translate`: reads sentences from stdin, one a line, and writes their translations to
// stdout in the same order. SentencePiece turns text into the model's ids and back; sentences are
// batched by length (--batch-tokens) and decoded with batched beam search (translate/). Output
// is written only once every line has translated, so a failure leaves none behind. --gpu N
// decodes on a CUDA device (fp32 GEMMs) in a build with the CUDA backend.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/memory_estimate.h"
#include "common/model_file.h"
#include "common/read_file.h"
#include "common/text_lines.h"
#include "launcher/command_line.h"
#include "launcher/memory_check.h"
#include "launcher/terminal_progress.h"
#include "launcher/thread_limit.h"
#include "worker/backend/backend_factory.h"
#include "worker/data/subword_vocabulary.h"
#include "worker/translate/beam_search.h"
#include "worker/translate/length_batches.h"

namespace psformer {
namespace {

// Standard input's lines as source ids, each cut to `max_source` tokens (the model has no
// positions beyond); says how many were cut, and which (the first few). Fails naming the line that
// cannot be encoded.
Status EncodeInput(const SubwordVocabulary& vocabulary, int max_source, std::vector<std::vector<int32_t>>* sources) {
  // Checked as UTF-8: SentencePiece would take a bad byte as an unknown piece and translate
  // something else.
  PSF_ASSIGN_OR_RETURN(const std::vector<std::string> lines,
                       ReadUtf8Lines(stdin, "standard input", CarriageReturn::kKeep, " (translate reads UTF-8 text)"));
  sources->assign(lines.size(), {});
  std::vector<size_t> truncated;  // line numbers, from 1
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int> ids;
    Status encoded = vocabulary.Encode(lines[i], &ids);
    if (!encoded.ok()) return Status::InvalidArgument("line " + std::to_string(i + 1) + ": " + encoded.message());
    // Keep the start of an overlong line.
    if (static_cast<int>(ids.size()) > max_source) {
      ids.resize(max_source);
      truncated.push_back(i + 1);
    }
    (*sources)[i].assign(ids.begin(), ids.end());
  }
  if (!truncated.empty()) {
    constexpr size_t kNamed = 5;
    std::string which;
    for (size_t k = 0; k < std::min(truncated.size(), kNamed); ++k) {
      which += (k == 0 ? "" : ", ") + std::to_string(truncated[k]);
    }
    if (truncated.size() > kNamed) which += " and " + std::to_string(truncated.size() - kNamed) + " more";
    std::cerr << "psformer translate: warning: " << truncated.size() << " line(s) longer than " << max_source
              << " subword tokens were cut to that length (line " << which << " of standard input)\n";
  }
  return Status::Ok();
}

// Standard input must be something to read lines from, checked before any file is opened (one
// opened with stdin closed would become descriptor 0 and be read as the input).
Status CheckStandardInput() {
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) != 0) {
    return Status::IoError(std::string("cannot read standard input: ") + std::strerror(errno) +
                           " (it is closed; give the sentences on stdin, one a line)");
  }
  if (S_ISDIR(st.st_mode)) return Status::IoError("cannot read standard input: Is a directory");
  // `translate < f 1<> f` would write each translation over the sentences still to be read (and
  // `> f` has emptied f before this runs), as cat refuses to.
  struct stat out {};
  if (S_ISREG(st.st_mode) && fstat(STDOUT_FILENO, &out) == 0 && S_ISREG(out.st_mode) && out.st_dev == st.st_dev &&
      out.st_ino == st.st_ino) {
    return Status::InvalidArgument(
        "standard output is the file standard input reads: the translations would overwrite the sentences "
        "(a '> FILE' of the input has emptied it already); write them to another file");
  }
  return Status::Ok();
}

// Every source translated, batched by length (`batch_tokens`), decoded back to text in input
// order.
StatusOr<std::vector<std::string>> TranslateAll(const ModelFile& model, const SubwordVocabulary& vocabulary,
                                                Backend<float>& backend, const BeamSearchOptions& beam,
                                                const std::vector<std::vector<int32_t>>& sources, int batch_tokens) {
  std::vector<int> lengths;
  for (const auto& source : sources) lengths.push_back(static_cast<int>(source.size()));
  BeamSearch<float> search(model.model, model.vocab_size, &backend, beam);
  DeviceBuffer<float> params = backend.Allocate<float>(model.params.size());
  params.Upload(model.params.data(), model.params.size());
  std::vector<std::string> output(sources.size());
  TerminalProgress progress("translate", static_cast<int64_t>(sources.size()), "sentences");
  int64_t translated = 0;
  for (const std::vector<int>& batch : LengthBatches(lengths, batch_tokens)) {
    std::vector<std::vector<int32_t>> batch_sources;
    for (int index : batch) batch_sources.push_back(sources[index]);
    PSF_ASSIGN_OR_RETURN(const std::vector<Translation> translations, search.Translate(params.data(), batch_sources));
    for (size_t j = 0; j < batch.size(); ++j) {
      const std::vector<int32_t>& tokens = translations[j].tokens;
      output[batch[j]] = vocabulary.Decode(std::vector<int>(tokens.begin(), tokens.end()));
    }
    translated += static_cast<int64_t>(batch.size());
    progress.Update(translated);
  }
  progress.Finish();
  return output;
}

}  // namespace

namespace {

// A beam's memory grows with its width: the scores of every hypothesis over the vocabulary and
// every hypothesis's cached keys and values. Beams wider than this are unusual and said so.
constexpr int kWideBeam = 64;

// Refuses a beam whose one-sentence footprint (logits and scores over the vocabulary, the
// decoder's cached keys and values up to the longest output) would not fit in this machine's
// memory; warns about a beam wider than kWideBeam, which rarely translates better.
Status CheckBeamFits(const BeamSearchOptions& beam, const ModelFile& model, uint64_t machine_bytes, int* batch_tokens) {
  const proto::ModelConfig& m = model.model;
  const double hypotheses = beam.beam;
  const double per_hypothesis =
      4.0 * (3.0 * model.vocab_size + 2.0 * m.layers() * static_cast<double>(m.max_positions()) * m.d_model());
  const double bytes = hypotheses * per_hypothesis;
  if (machine_bytes > 0 && bytes > 0.5 * static_cast<double>(machine_bytes)) {
    return Status::InvalidArgument(
        "--beam " + std::to_string(beam.beam) + " would need about " + FormatBytes(static_cast<uint64_t>(bytes)) +
        " for a single sentence (scores over the " + std::to_string(model.vocab_size) +
        "-piece vocabulary and cached keys and values of every hypothesis), more than half of this machine's " +
        FormatBytes(machine_bytes) + "; use a narrower beam (4 to 10 is usual)");
  }
  if (beam.beam > kWideBeam) {
    std::cerr << "psformer translate: warning: --beam " << beam.beam << " is unusually wide (4 to 10 is usual; "
              << "wider beams rarely translate better and often worse); it needs about "
              << FormatBytes(static_cast<uint64_t>(bytes)) << " per sentence in a batch\n";
  }
  // A batch holds at most batch_tokens / 2 sentences (each at least one piece and its eos, padded
  // alike): fewer where all of theirs would not fit in half the machine.
  if (machine_bytes > 0 && bytes > 0) {
    const double fit = std::floor(0.5 * static_cast<double>(machine_bytes) / bytes);
    if (fit * 2 < *batch_tokens) {
      const int lowered = static_cast<int>(std::max(2.0, fit * 2));
      std::cerr << "psformer translate: --batch-tokens " << *batch_tokens << " lowered to " << lowered
                << ", so that a batch's beams fit in half of this machine's " << FormatBytes(machine_bytes) << "\n";
      *batch_tokens = lowered;
    }
  }
  return Status::Ok();
}

}  // namespace

int RunTranslateCommand(const Args& args) {
  po::options_description options("translate options");
  BeamSearchOptions beam;
  int batch_tokens = 0, threads = 0, gpu = -1;
  // clang-format off
  options.add_options()
      ("model", po::value<std::string>()->required(), "model file (RUN_DIR/model.bin or psformer average's output)")
      ("spm", po::value<std::string>(),
       "SentencePiece model the model was trained with (default: the spm.model of the corpus of the run "
       "directory the model lies in)")
      ("beam", po::value<int>(&beam.beam)->default_value(4), "beam size (1 = greedy)")
      ("alpha", po::value<double>(&beam.alpha)->default_value(0.6, ShortestText(0.6)), "length penalty ((5 + |Y|) / 6)^alpha")
      ("max-len-a", po::value<double>(&beam.max_len_a)->default_value(1.0, ShortestText(1.0)),
       "maximum output length = a * source length + b (subword tokens)")
      ("max-len-b", po::value<int>(&beam.max_len_b)->default_value(50), "see --max-len-a")
      ("batch-tokens", po::value<int>(&batch_tokens)->default_value(2048),
       "source tokens (with padding) per batch; sentences are batched by length")
      ("threads", po::value<int>(&threads)->default_value(0), "CPU threads (0 = every core; at most 4 a core)")
      ("gpu", po::value<int>(&gpu)->default_value(-1), "decode on this CUDA device, fp32 GEMMs (-1: on the CPU)");
  // clang-format on
  const std::string usage = "--model M [--spm SPM] [options] < input > output";
  const po::positional_options_description no_positional;
  ParsedOptions parsed = ParseOptions("translate", usage, args, options, &no_positional);
  if (parsed.exit_status) return *parsed.exit_status;
  Status valid = ValidateBeamSearchOptions(beam);
  if (valid.ok() && batch_tokens < 1) valid = Status::InvalidArgument("--batch-tokens must be at least 1");
  if (valid.ok() && threads < 0) valid = Status::InvalidArgument("--threads must be >= 0");
  if (valid.ok()) valid = CheckThreadCount("--threads", threads);
  if (valid.ok() && gpu < -1) valid = Status::InvalidArgument("--gpu must be a CUDA device ordinal, or -1 for the CPU");
  if (!valid.ok()) {
    std::cerr << "psformer translate: error: " << valid.message() << "\nusage: psformer translate " << usage
              << "  (see --help)\n";
    return kExitUsage;
  }

  if (Status input = CheckStandardInput(); !input.ok()) return ReportError("translate", input);
  const std::string model_path = parsed.values["model"].as<std::string>();
  auto model = ReadModelFile(model_path);
  if (!model.ok()) return ReportError("translate", model.status());
  std::string spm_path;
  if (parsed.values.count("spm")) {
    spm_path = parsed.values["spm"].as<std::string>();
  } else {
    auto found = SentencePieceOfRun(model_path);
    if (!found.ok()) return ReportError("translate", found.status());
    spm_path = *found;
    std::cerr << "psformer translate: --spm " << spm_path << " (the corpus of the model's run)\n";
  }
  auto spm_bytes = ReadFileBytes(spm_path, "--spm", kMaxSentencePieceBytes);
  if (!spm_bytes.ok()) return ReportError("translate", spm_bytes.status());
  auto vocabulary = SubwordVocabulary::FromSerialized(*spm_bytes, spm_path);
  if (!vocabulary.ok()) return ReportError("translate", vocabulary.status());
  if (vocabulary->size() != model->vocab_size) {
    return ReportError("translate", "vocabulary mismatch: " + spm_path + " has " + std::to_string(vocabulary->size()) +
                                        " pieces but " + model_path + " was trained with a vocabulary of " +
                                        std::to_string(model->vocab_size));
  }
  std::string spm_warning;
  if (Status same = CheckSentencePiece(*model, model_path, *spm_bytes, spm_path, &spm_warning); !same.ok()) {
    return ReportError("translate", same);
  }
  if (!spm_warning.empty()) std::cerr << "psformer translate: warning: " << spm_warning << "\n";

  if (Status fits = CheckBeamFits(beam, *model, HostMemoryBytes(), &batch_tokens); !fits.ok()) {
    return ReportError("translate", fits);
  }

  // Declared before every buffer of it, so that they go first.
  BackendChoice choice;
  choice.gpu = gpu;
  choice.cpu_threads = threads;
  auto made = MakeBackend(choice);
  if (!made.ok()) return ReportError("translate", made.status());
  std::unique_ptr<Backend<float>> backend = std::move(made).value();

  std::vector<std::vector<int32_t>> sources;
  if (Status read = EncodeInput(*vocabulary, model->model.max_positions() - 1, &sources); !read.ok()) {
    return ReportError("translate", read);
  }
  auto output = TranslateAll(*model, *vocabulary, *backend, beam, sources, batch_tokens);
  if (!output.ok()) return ReportError("translate", output.status());
  // RunCommandLine checks that all of it reached standard output.
  for (const std::string& line : *output) std::cout << line << "\n";
  return 0;
}

}  // namespace psformer
