// The JSON files of a Marian export beside its weights: what transformers reads to build the
// model, the tokenizer and the default generation settings. psformer's ids throughout: pad 0,
// bos 1, eos 2, unk 3 (worker/data/batch.h).
#ifndef PSFORMER_EXPORT_MARIAN_CONFIG_H_
#define PSFORMER_EXPORT_MARIAN_CONFIG_H_

#include <string>

#include "common/model_file.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {

// config.json of `model`'s sizes for its architecture (ArchitectureOf): a MarianConfig for the
// paper's Transformer (POST_LN) or a PegasusConfig (PRE_LN); both relu, embeddings scaled by
// sqrt(d_model), one shared embedding tied to the output, decoding started from bos
// (decoder_start_token_id), as psformer does.
std::string MarianConfigJson(const ModelFile& model);

// generation_config.json: beam 4; pad and bos never produced (bad_words_ids), as in psformer's
// beam search; at most max_positions - 1 tokens before eos (max_length counts the start token
// and eos too), eos forced at the limit. The length penalty differs (docs/export.md).
std::string GenerationConfigJson(const ModelFile& model);

// tokenizer_config.json: MarianTokenizer with one joint vocabulary, sources up to max_positions
// ids (eos included), the pieces of psformer's special ids in `vocabulary` ("</s>", "<unk>", "<pad>").
std::string TokenizerConfigJson(const ModelFile& model, const SubwordVocabulary& vocabulary);

// vocab.json: every piece of `vocabulary` with its id.
std::string VocabJson(const SubwordVocabulary& vocabulary);

}  // namespace psformer

#endif  // PSFORMER_EXPORT_MARIAN_CONFIG_H_
