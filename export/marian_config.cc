#include "export/marian_config.h"

#include <sstream>

#include "common/json_text.h"
#include "export/marian_tensors.h"
#include "worker/data/batch.h"

namespace psformer {
namespace {

// Special ids as the config files name them.
std::string TokenIds() {
  std::ostringstream s;
  s << "  \"pad_token_id\": " << kPadId << ",\n"
    << "  \"bos_token_id\": " << kBosId << ",\n"
    << "  \"eos_token_id\": " << kEosId << ",\n"
    << "  \"decoder_start_token_id\": " << kBosId << ",\n"
    << "  \"forced_eos_token_id\": " << kEosId << ",\n";
  return s.str();
}

}  // namespace

std::string MarianConfigJson(const ModelFile& model) {
  const proto::ModelConfig& m = model.model;
  const bool pegasus = ArchitectureOf(model) == ExportArchitecture::kPegasus;
  std::ostringstream s;
  s << "{\n"
    << "  \"architectures\": [\"" << ArchitectureName(ArchitectureOf(model)) << "\"],\n"
    << "  \"model_type\": \"" << (pegasus ? "pegasus" : "marian") << "\",\n"
    << "  \"vocab_size\": " << model.vocab_size << ",\n";
  if (!pegasus) s << "  \"decoder_vocab_size\": " << model.vocab_size << ",\n";
  s << "  \"d_model\": " << m.d_model() << ",\n"
    << "  \"encoder_layers\": " << m.layers() << ",\n"
    << "  \"decoder_layers\": " << m.layers() << ",\n"
    << "  \"num_hidden_layers\": " << m.layers() << ",\n"
    << "  \"encoder_attention_heads\": " << m.heads() << ",\n"
    << "  \"decoder_attention_heads\": " << m.heads() << ",\n"
    << "  \"encoder_ffn_dim\": " << m.d_ff() << ",\n"
    << "  \"decoder_ffn_dim\": " << m.d_ff() << ",\n"
    << "  \"max_position_embeddings\": " << m.max_positions() << ",\n"
    << "  \"activation_function\": \"relu\",\n"
    << "  \"scale_embedding\": true,\n"
    << "  \"tie_word_embeddings\": true,\n";
  // Marian's options that Pegasus lacks: it always shares and ties the embedding, always uses
  // static sinusoids and always normalises before each sub-layer.
  if (!pegasus) {
    s << "  \"share_encoder_decoder_embeddings\": true,\n"
      << "  \"static_position_embeddings\": true,\n"
      << "  \"normalize_before\": false,\n"
      << "  \"normalize_embedding\": false,\n"
      << "  \"add_bias_logits\": false,\n";
  }
  s << "  \"dropout\": " << m.dropout() << ",\n"
    << "  \"attention_dropout\": " << m.attention_dropout() << ",\n"
    << "  \"activation_dropout\": " << m.relu_dropout() << ",\n"
    << TokenIds() << "  \"is_encoder_decoder\": true,\n"
    << "  \"use_cache\": true,\n"
    << "  \"torch_dtype\": \"float32\"\n"
    << "}\n";
  return s.str();
}

std::string GenerationConfigJson(const ModelFile& model) {
  std::ostringstream s;
  s << "{\n"
    << TokenIds() << "  \"bad_words_ids\": [[" << kPadId << "], [" << kBosId << "]],\n"
    << "  \"num_beams\": 4,\n"
    << "  \"max_length\": " << model.model.max_positions() + 1 << "\n"
    << "}\n";
  return s.str();
}

std::string TokenizerConfigJson(const ModelFile& model, const SubwordVocabulary& vocabulary) {
  std::ostringstream s;
  s << "{\n"
    << "  \"tokenizer_class\": \"MarianTokenizer\",\n"
    << "  \"source_lang\": null,\n"
    << "  \"target_lang\": null,\n"
    << "  \"separate_vocabs\": false,\n"
    << "  \"eos_token\": " << JsonQuote(vocabulary.Piece(kEosId)) << ",\n"
    << "  \"unk_token\": " << JsonQuote(vocabulary.Piece(kUnkId)) << ",\n"
    << "  \"pad_token\": " << JsonQuote(vocabulary.Piece(kPadId)) << ",\n"
    << "  \"model_max_length\": " << model.model.max_positions() << ",\n"
    << "  \"sp_model_kwargs\": {}\n"
    << "}\n";
  return s.str();
}

std::string VocabJson(const SubwordVocabulary& vocabulary) {
  std::string out = "{\n";
  for (int id = 0; id < vocabulary.size(); ++id) {
    out += "  " + JsonQuote(vocabulary.Piece(id)) + ": " + std::to_string(id) +
           (id + 1 < vocabulary.size() ? ",\n" : "\n");
  }
  return out + "}\n";
}

}  // namespace psformer
