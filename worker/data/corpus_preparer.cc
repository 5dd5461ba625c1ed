#include "worker/data/corpus_preparer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/model_file.h"
#include "common/read_file.h"
#include "common/temporary_directory.h"
#include "common/text_lines.h"
#include "common/write_file.h"
#include "worker/data/corpus_file.h"
#include "worker/data/in_memory_corpus.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {
namespace fs = std::filesystem;
namespace {

using Lines = std::vector<std::string>;

struct ParallelText {
  Lines src;
  Lines tgt;
};

}  // namespace

Status CheckPrepareOptions(const PrepareOptions& o) {
  if (o.src_path.empty() || o.tgt_path.empty()) return Status::InvalidArgument("--src and --tgt are required");
  if (o.out_dir.empty()) return Status::InvalidArgument("--out is required");
  if (o.valid_src_path.empty() != o.valid_tgt_path.empty()) {
    return Status::InvalidArgument("--valid-src and --valid-tgt go together: give both or neither");
  }
  if (o.spm_model.empty() && o.vocab_size <= 4) {
    return Status::InvalidArgument("--vocab-size " + std::to_string(o.vocab_size) +
                                   " must exceed the 4 reserved ids (pad, bos, eos, unk)");
  }
  if (o.max_length <= 0) return Status::InvalidArgument("--max-length must be positive");
  if (!(o.max_length_ratio >= 1)) return Status::InvalidArgument("--max-length-ratio must be >= 1");
  return Status::Ok();
}

namespace {

Status CheckOptions(const PrepareOptions& o) {
  PSF_RETURN_IF_ERROR(CheckPrepareOptions(o));
  std::error_code ec;
  if (fs::exists(o.out_dir, ec)) {
    return Status::InvalidArgument("--out " + o.out_dir +
                                   " already exists; prepare never overwrites: remove it or name another directory");
  }
  return Status::Ok();
}

StatusOr<ParallelText> ReadParallelText(const std::string& src_path, const std::string& tgt_path,
                                        const std::string& src_flag, const std::string& tgt_flag) {
  ParallelText text;
  PSF_ASSIGN_OR_RETURN(text.src, ReadUtf8Lines(src_path, CarriageReturn::kDrop));
  PSF_ASSIGN_OR_RETURN(text.tgt, ReadUtf8Lines(tgt_path, CarriageReturn::kDrop));
  if (text.src.size() != text.tgt.size()) {
    return Status::InvalidArgument(src_flag + " " + src_path + " has " + std::to_string(text.src.size()) +
                                   " lines but " + tgt_flag + " " + tgt_path + " has " +
                                   std::to_string(text.tgt.size()) + "; a parallel corpus has one line per pair");
  }
  if (text.src.empty()) {
    return Status::InvalidArgument(src_flag + " " + src_path + " and " + tgt_flag + " " + tgt_path +
                                   " are empty: no sentence pairs to prepare");
  }
  return text;
}

// Encodes every pair of `split` and keeps those the filters let through.
Status EncodeAndFilter(const std::string& split, const ParallelText& text, const SubwordVocabulary& vocabulary,
                       const PrepareOptions& o, InMemoryCorpus* corpus, SplitReport* report) {
  std::vector<int> src, tgt;  // (pieces of one sentence)
  report->pairs_read = static_cast<int64_t>(text.src.size());
  constexpr size_t kProgressEvery = 256;  // pairs between two progress calls
  for (size_t i = 0; i < text.src.size(); ++i) {
    if (o.progress && i % kProgressEvery == 0) o.progress(split, static_cast<int64_t>(i), report->pairs_read);
    PSF_RETURN_IF_ERROR(vocabulary.Encode(text.src[i], &src));
    PSF_RETURN_IF_ERROR(vocabulary.Encode(text.tgt[i], &tgt));
    const size_t shorter = std::min(src.size(), tgt.size());
    const size_t longer = std::max(src.size(), tgt.size());
    if (shorter == 0) {
      ++report->dropped_empty;
    } else if (longer > static_cast<size_t>(o.max_length)) {
      ++report->dropped_too_long;
    } else if (static_cast<double>(longer) > o.max_length_ratio * static_cast<double>(shorter)) {
      ++report->dropped_ratio;
    } else {
      corpus->Add(src, tgt);
      ++report->pairs_kept;
      report->src_tokens += static_cast<int64_t>(src.size());
      report->tgt_tokens += static_cast<int64_t>(tgt.size());
    }
  }
  if (o.progress) o.progress(split, report->pairs_read, report->pairs_read);
  return Status::Ok();
}

std::string DropSummary(const SplitReport& r, const PrepareOptions& o) {
  std::ostringstream s;
  s << r.dropped_empty << " with an empty side, " << r.dropped_too_long << " with a side over " << o.max_length
    << " pieces, " << r.dropped_ratio << " with a length ratio over " << o.max_length_ratio;
  return s.str();
}

Status WriteWholeFile(const std::string& path, const std::string& bytes) { return WriteFileAtomically(path, bytes); }

}  // namespace

StatusOr<PrepareReport> PrepareCorpus(const PrepareOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  PSF_RETURN_IF_ERROR(CheckOptions(options));
  // Written beside the target and renamed at the end: a failure leaves no partial directory.
  // Made first, so that an --out that cannot be written is said before minutes of learning.
  PSF_ASSIGN_OR_RETURN(TemporaryDirectory temp, TemporaryDirectory::CreateBeside(options.out_dir));
  PrepareReport report;
  PSF_ASSIGN_OR_RETURN(ParallelText train, ReadParallelText(options.src_path, options.tgt_path, "--src", "--tgt"));
  std::optional<ParallelText> valid;
  if (!options.valid_src_path.empty()) {
    PSF_ASSIGN_OR_RETURN(
        valid, ReadParallelText(options.valid_src_path, options.valid_tgt_path, "--valid-src", "--valid-tgt"));
  }

  std::string model_bytes;
  if (options.spm_model.empty()) {
    BpeOptions bpe;
    bpe.vocab_size = options.vocab_size;
    bpe.threads = options.threads;
    auto trained = TrainJointBpe({&train.src, &train.tgt}, bpe);
    if (!trained.ok())
      return trained.status().WithContext("learning the vocabulary from " + options.src_path + " and " +
                                          options.tgt_path);
    model_bytes = std::move(trained).value();
    report.learned_vocabulary = true;
  } else {
    PSF_ASSIGN_OR_RETURN(model_bytes, ReadFileBytes(options.spm_model, "--spm", kMaxSentencePieceBytes));
  }
  PSF_ASSIGN_OR_RETURN(SubwordVocabulary vocabulary,
                       SubwordVocabulary::FromSerialized(
                           model_bytes, options.spm_model.empty() ? "the learnt model" : options.spm_model));
  report.vocab_size = vocabulary.size();

  InMemoryCorpus train_corpus;
  PSF_RETURN_IF_ERROR(EncodeAndFilter("training pairs", train, vocabulary, options, &train_corpus, &report.train));
  if (report.train.pairs_kept == 0) {
    return Status::InvalidArgument("no pair of " + options.src_path + " / " + options.tgt_path + " is left: of " +
                                   std::to_string(report.train.pairs_read) + " read, " +
                                   DropSummary(report.train, options));
  }
  InMemoryCorpus valid_corpus;
  if (valid) {
    report.valid.emplace();
    PSF_RETURN_IF_ERROR(
        EncodeAndFilter("validation pairs", *valid, vocabulary, options, &valid_corpus, &*report.valid));
    // An empty valid.bin would be refused by every job that asks for validation.
    if (report.valid->pairs_kept == 0) {
      return Status::InvalidArgument("no pair of " + options.valid_src_path + " / " + options.valid_tgt_path +
                                     " is left: of " + std::to_string(report.valid->pairs_read) + " read, " +
                                     DropSummary(*report.valid, options) +
                                     " (raise --max-length, or leave out --valid-src and --valid-tgt)");
    }
  }

  const fs::path out = fs::absolute(options.out_dir).lexically_normal();
  const fs::path final_dir = out.has_filename() ? out : out.parent_path();
  PSF_RETURN_IF_ERROR(WriteWholeFile((temp.path() / "spm.model").string(), model_bytes));
  // The corpus files name the model their ids are of: a job refuses them beside another one.
  const std::string spm_digest = SentencePieceDigest(model_bytes);
  PSF_RETURN_IF_ERROR(
      WriteCorpusFile((temp.path() / "train.bin").string(), train_corpus, report.vocab_size, spm_digest));
  if (valid) {
    PSF_RETURN_IF_ERROR(
        WriteCorpusFile((temp.path() / "valid.bin").string(), valid_corpus, report.vocab_size, spm_digest));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PSF_RETURN_IF_ERROR(WriteWholeFile((temp.path() / "report.txt").string(), FormatPrepareReport(report, options)));
  PSF_RETURN_IF_ERROR(temp.RenameTo(final_dir));
  return report;
}

std::string FormatPrepareReport(const PrepareReport& r, const PrepareOptions& o) {
  std::ostringstream s;
  auto split = [&s, &o](const char* name, const SplitReport& x, const std::string& src, const std::string& tgt) {
    s << name << ": " << src << " / " << tgt << "\n"
      << "  pairs read     " << x.pairs_read << "\n"
      << "  pairs kept     " << x.pairs_kept << "\n"
      << "  pairs dropped  " << (x.pairs_read - x.pairs_kept) << ": " << DropSummary(x, o) << "\n"
      << "  tokens         source " << x.src_tokens << ", target " << x.tgt_tokens << " (pieces, no bos/eos)\n";
  };
  split("train", r.train, o.src_path, o.tgt_path);
  if (r.valid) split("valid", *r.valid, o.valid_src_path, o.valid_tgt_path);
  s << "vocabulary: " << r.vocab_size << " pieces, "
    << (r.learned_vocabulary ? "joint BPE learnt from both training sides" : "from " + o.spm_model) << "\n";
  const double sentences = static_cast<double>(r.train.pairs_read + (r.valid ? r.valid->pairs_read : 0));
  s << "time: " << r.seconds << " s (" << static_cast<int64_t>(sentences / std::max(r.seconds, 1e-9)) << " pairs/s)\n";
  return s.str();
}

}  // namespace psformer
