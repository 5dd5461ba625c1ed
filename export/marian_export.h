// `psformer export --format hf`: a model file and its SentencePiece model as a directory that
// transformers' AutoModelForSeq2SeqLM.from_pretrained (MarianMTModel for a POST_LN model,
// PegasusForConditionalGeneration for a PRE_LN one) and MarianTokenizer.from_pretrained load with
// no other files (docs/export.md):
//   config.json             MarianConfig or PegasusConfig: the model's sizes, relu, scaled embeddings, the ids
//   model.safetensors       the weights (export/marian_tensors.h)
//   source.spm, target.spm  the joint SentencePiece model, twice (MarianTokenizer wants both)
//   vocab.json              piece -> id, psformer's ids
//   tokenizer_config.json   MarianTokenizer and its special pieces
//   generation_config.json  beam 4, start from bos, never produce pad or bos
#ifndef PSFORMER_EXPORT_MARIAN_EXPORT_H_
#define PSFORMER_EXPORT_MARIAN_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace psformer {

struct MarianExportOptions {
  std::string model_path;  // model.bin (psformer train or psformer average)
  // The SentencePiece model it was trained with; none: the one of the model's run
  // (SentencePieceOfRun, common/model_file.h).
  std::optional<std::string> spm_path;
  std::string out_dir;  // must not exist, or be an empty directory
};

struct MarianExportReport {
  const char* architecture = "";  // "MarianMTModel" or "PegasusForConditionalGeneration"
  int64_t tensors = 0;            // in model.safetensors
  int64_t bytes = 0;              // of model.safetensors
  std::string spm_warning;        // the model records no SentencePiece model to check --spm against
  std::string spm_path;           // the SentencePiece model exported (spm_path's, or the run's)
};

// Checks everything before writing anything (the model reads with the layout's shapes, the
// SentencePiece model has psformer's reserved ids and the model's vocabulary size, and is the
// one the model records (CheckSentencePiece),
// out_dir is free), then writes the files into a temporary directory beside out_dir and renames
// it. On failure nothing is left at out_dir or beside it; the Status names the problem.
StatusOr<MarianExportReport> ExportMarian(const MarianExportOptions& options);

}  // namespace psformer

#endif  // PSFORMER_EXPORT_MARIAN_EXPORT_H_
