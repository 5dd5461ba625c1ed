// What `psformer prepare` does: read a parallel corpus, learn (or load) the joint BPE
// vocabulary, encode both sides, drop unusable pairs, and write
//   OUT/spm.model   the SentencePiece model (pad 0, bos 1, eos 2, unk 3)
//   OUT/train.bin   the kept training pairs (corpus_file.h), recording spm.model's digest
//   OUT/valid.bin   the kept validation pairs, when a validation corpus is given (likewise)
//   OUT/report.txt  the figures PrepareReport holds, as printed
// Everything is written into a temporary directory beside OUT that is renamed to OUT at the
// end, so a failure at any point leaves no OUT behind.
#ifndef PSFORMER_WORKER_DATA_CORPUS_PREPARER_H_
#define PSFORMER_WORKER_DATA_CORPUS_PREPARER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace psformer {

struct PrepareOptions {
  std::string src_path;        // one sentence a line, UTF-8
  std::string tgt_path;        // the translations, line by line
  std::string out_dir;         // must not exist yet
  std::string valid_src_path;  // optional; given together with valid_tgt_path
  std::string valid_tgt_path;
  std::string spm_model;          // an existing SentencePiece model to use; empty = learn one
  int vocab_size = 8000;          // pieces of the learnt model, reserved ids included
  int max_length = 250;           // drop pairs with a side longer than this many pieces
  double max_length_ratio = 3.0;  // drop pairs whose longer side exceeds this x the shorter
  int threads = 2;                // SentencePiece trainer threads
  // Called now and then while pairs are encoded (and at the end of each split), with the split
  // ("training pairs", "validation pairs"), how many of its pairs are done and how many it has:
  // for a progress meter. Unset = none.
  std::function<void(const std::string& split, int64_t done, int64_t total)> progress;
};

// Figures for one split.
struct SplitReport {
  int64_t pairs_read = 0;
  int64_t pairs_kept = 0;
  int64_t dropped_empty = 0;     // a side empty (or nothing but spaces)
  int64_t dropped_too_long = 0;  // a side over max_length pieces
  int64_t dropped_ratio = 0;     // length ratio over max_length_ratio
  int64_t src_tokens = 0;        // pieces of the kept pairs, no bos/eos
  int64_t tgt_tokens = 0;
};

struct PrepareReport {
  SplitReport train;
  std::optional<SplitReport> valid;
  int vocab_size = 0;
  bool learned_vocabulary = false;  // false: --spm given
  double seconds = 0;               // wall time of the whole preparation
};

// InvalidArgument naming the option when the options themselves are wrong (a path missing,
// --valid-src without --valid-tgt, a size out of range); touches no file.
Status CheckPrepareOptions(const PrepareOptions& options);

// Fails, naming files and line numbers where there are some, when: the options are wrong
// (CheckPrepareOptions); OUT exists; a file cannot
// be read; a line is not UTF-8; the two sides differ in line count; the corpus is empty or no
// pair survives the filters; the vocabulary cannot be learnt at that size; a write fails.
StatusOr<PrepareReport> PrepareCorpus(const PrepareOptions& options);

// The report as `psformer prepare` prints it.
std::string FormatPrepareReport(const PrepareReport& report, const PrepareOptions& options);

}  // namespace psformer

#endif  // PSFORMER_WORKER_DATA_CORPUS_PREPARER_H_
