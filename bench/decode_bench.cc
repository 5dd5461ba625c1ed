// Translation speed of batched beam search on the CPU backend: sentences/s and output tokens/s
// for a model with random weights (speed does not depend on what the weights say, only on the
// model's shape, the batch and the output lengths, which are printed). Run by hand; results go to
// bench/RESULTS.md ("## Translation").
//   decode_bench [--layers 6 --d-model 512 --d-ff 2048 --heads 8 --vocab 8000] [--sentences 64]
//                [--src-len 20] [--beam 4] [--max-len-b 0] [--batch 32] [--threads 0] [--cuda]
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/param_init.h"
#include "common/param_layout.h"
#include "worker/backend/backend_factory.h"
#include "worker/data/batch.h"
#include "worker/translate/beam_search.h"

namespace po = boost::program_options;

namespace psformer {
namespace {

// `sentences` sources of `length` random non-reserved ids (the same every run).
std::vector<std::vector<int32_t>> RandomSources(int sentences, int length, int vocab) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(kNumReservedIds, vocab - 1);
  std::vector<std::vector<int32_t>> sources(sentences, std::vector<int32_t>(length));
  for (auto& s : sources) {
    for (int32_t& t : s) t = token(rng);
  }
  return sources;
}

// Translates `sources` `batch` at a time; returns the output tokens, eos included.
StatusOr<long long> TranslateAll(BeamSearch<float>& search, const float* params,
                                 const std::vector<std::vector<int32_t>>& sources, int batch) {
  long long output_tokens = 0;
  for (size_t first = 0; first < sources.size(); first += batch) {
    const size_t end = std::min(sources.size(), first + batch);
    const std::vector<std::vector<int32_t>> part(sources.begin() + first, sources.begin() + end);
    PSF_ASSIGN_OR_RETURN(const std::vector<Translation> translations, search.Translate(params, part));
    for (const Translation& t : translations) output_tokens += static_cast<long long>(t.tokens.size()) + 1;
  }
  return output_tokens;
}

}  // namespace
}  // namespace psformer

int main(int argc, char** argv) {
  using namespace psformer;
  int layers, d_model, d_ff, heads, vocab, sentences, src_len, batch, threads;
  BeamSearchOptions beam;
  po::options_description options("decode_bench options");
  // clang-format off
  options.add_options()
      ("help,h", "print this help")
      ("layers", po::value(&layers)->default_value(6), "layers per stack")
      ("d-model", po::value(&d_model)->default_value(512), "model width")
      ("d-ff", po::value(&d_ff)->default_value(2048), "feed-forward width")
      ("heads", po::value(&heads)->default_value(8), "attention heads")
      ("vocab", po::value(&vocab)->default_value(8000), "vocabulary size")
      ("sentences", po::value(&sentences)->default_value(64), "sentences to translate")
      ("src-len", po::value(&src_len)->default_value(20), "source tokens per sentence")
      ("beam", po::value(&beam.beam)->default_value(4), "beam size")
      ("alpha", po::value(&beam.alpha)->default_value(0.6), "length penalty")
      ("max-len-a", po::value(&beam.max_len_a)->default_value(1.0), "max output = a * src-len + b")
      ("max-len-b", po::value(&beam.max_len_b)->default_value(0), "see --max-len-a")
      ("batch", po::value(&batch)->default_value(32), "sentences per Translate call")
      ("threads", po::value(&threads)->default_value(0), "CPU threads (0 = every core)")
      ("cuda", "run on CUDA device 0 (fp32 GEMMs) instead of the CPU");
  // clang-format on
  po::variables_map values;
  try {
    po::store(po::parse_command_line(argc, argv, options), values);
    po::notify(values);
  } catch (const po::error& e) {
    std::cerr << "decode_bench: error: " << e.what() << "\n";
    return 2;
  }
  if (values.count("help")) {
    std::cout << options << "\n";
    return 0;
  }
  if (!ValidateBeamSearchOptions(beam).ok() || layers < 1 || heads < 1 || d_model % heads != 0 ||
      vocab <= kNumReservedIds || sentences < 1 || src_len < 1 || batch < 1 || threads < 0) {
    std::cerr << "decode_bench: error: invalid options (see --help)\n";
    return 2;
  }

  proto::ModelConfig config;
  config.set_layers(layers);
  config.set_d_model(d_model);
  config.set_d_ff(d_ff);
  config.set_heads(heads);
  config.set_max_positions(std::max(1024, 2 * src_len + beam.max_len_b + 2));
  const ParamLayout layout(config, vocab);
  std::vector<float> params(layout.total_size());
  InitParamRange(layout, 1, 0, layout.total_size(), params.data());

  BackendChoice choice;
  choice.gpu = values.count("cuda") ? 0 : -1;
  choice.cpu_threads = threads;
  std::string device;
  auto backend = MakeBackend(choice, &device);
  if (!backend.ok()) {
    std::cerr << "decode_bench: error: " << backend.status().ToString() << "\n";
    return 1;
  }
  BeamSearch<float> search(config, vocab, backend->get(), beam);
  DeviceBuffer<float> device_params = (*backend)->Allocate<float>(params.size());
  device_params.Upload(params.data(), params.size());
  const auto start = std::chrono::steady_clock::now();
  const StatusOr<long long> output_tokens =
      TranslateAll(search, device_params.data(), RandomSources(sentences, src_len, vocab), batch);
  if (!output_tokens.ok()) {
    std::cerr << "decode_bench: error: " << output_tokens.status().ToString() << "\n";
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "model: %d layers, d_model %d, d_ff %d, heads %d, vocab %d (%llu parameters); %s\n"
      "%d sentences of %d source tokens, beam %d, batch %d: %lld output tokens (eos included) in %.2f s\n"
      "%.2f sentences/s, %.1f output tokens/s\n",
      layers, d_model, d_ff, heads, vocab, static_cast<unsigned long long>(layout.total_size()), device.c_str(),
      sentences, src_len, beam.beam, batch, *output_tokens, seconds, sentences / seconds, *output_tokens / seconds);
  return 0;
}
