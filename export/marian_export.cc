#include "export/marian_export.h"

#include <sys/stat.h>

#include <filesystem>

#include "common/model_file.h"
#include "common/read_file.h"
#include "common/temporary_directory.h"
#include "common/write_file.h"
#include "export/marian_config.h"
#include "export/marian_tensors.h"
#include "export/safetensors_file.h"
#include "worker/data/subword_vocabulary.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// The output directory may be new or an empty directory; anything else is refused rather than
// overwritten (a user's files, or an export the user may still want).
Status CheckOutputFree(const std::string& out_dir) {
  std::error_code ec;
  // The export is renamed onto out_dir at the end, which neither a symbolic link (ENOTDIR) nor
  // a mount point (EBUSY) can take: refused now, before anything is written.
  if (fs::is_symlink(fs::symlink_status(out_dir, ec))) {
    return Status::InvalidArgument(
        "--out " + out_dir + " is a symbolic link (to " + fs::read_symlink(out_dir, ec).string() +
        "); export writes a directory in its place: name the directory itself, or a new one");
  }
  const fs::file_status st = fs::status(out_dir, ec);
  if (!fs::exists(st)) return Status::Ok();
  if (!fs::is_directory(st)) return Status::InvalidArgument("--out " + out_dir + " exists and is not a directory");
  struct stat self;
  struct stat parent;
  const fs::path absolute = fs::absolute(out_dir).lexically_normal();
  const fs::path above = (absolute.has_filename() ? absolute : absolute.parent_path()).parent_path();
  if (stat(out_dir.c_str(), &self) == 0 && stat(above.c_str(), &parent) == 0 && self.st_dev != parent.st_dev) {
    return Status::InvalidArgument("--out " + out_dir +
                                   " is a mount point; export writes beside it and renames its directory into place, "
                                   "which a mount point refuses: name a new directory inside it");
  }
  if (!fs::is_empty(out_dir, ec) || ec) {
    return Status::InvalidArgument("--out " + out_dir +
                                   " exists and is not empty; export writes a new directory (remove it or "
                                   "choose another)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<MarianExportReport> ExportMarian(const MarianExportOptions& options) {
  if (options.out_dir.empty()) return Status::InvalidArgument("--out is empty: name the directory to write");
  PSF_RETURN_IF_ERROR(CheckOutputFree(options.out_dir));
  PSF_ASSIGN_OR_RETURN(ModelFile model, ReadModelFile(options.model_path));
  const Status compatible = CheckExportable(model);
  if (!compatible.ok()) return Status::InvalidArgument(options.model_path + ": " + compatible.message());
  MarianExportReport report;
  if (options.spm_path) {
    report.spm_path = *options.spm_path;
  } else {
    PSF_ASSIGN_OR_RETURN(report.spm_path, SentencePieceOfRun(options.model_path));
  }
  const std::string& spm_path = report.spm_path;
  PSF_ASSIGN_OR_RETURN(std::string spm_bytes, ReadFileBytes(spm_path, "--spm", kMaxSentencePieceBytes));
  PSF_ASSIGN_OR_RETURN(SubwordVocabulary vocabulary, SubwordVocabulary::FromSerialized(spm_bytes, spm_path));
  if (vocabulary.size() != model.vocab_size) {
    return Status::InvalidArgument("vocabulary mismatch: " + spm_path + " has " + std::to_string(vocabulary.size()) +
                                   " pieces but " + options.model_path + " was trained with a vocabulary of " +
                                   std::to_string(model.vocab_size));
  }
  PSF_RETURN_IF_ERROR(CheckSentencePiece(model, options.model_path, spm_bytes, spm_path, &report.spm_warning));

  std::string weights;
  {
    const std::vector<NamedTensor> tensors = MarianTensors(model);
    report.tensors = static_cast<int64_t>(tensors.size());
    report.architecture = ArchitectureName(ArchitectureOf(model));
    weights = SerializeSafetensors(tensors);
    report.bytes = static_cast<int64_t>(weights.size());
  }
  // Only now, so that bad input leaves not even the parents of --out behind.
  auto temp = TemporaryDirectory::CreateBeside(options.out_dir);
  if (!temp.ok()) return Status::IoError("cannot write --out " + options.out_dir + ": " + temp.status().message());
  const auto write = [&temp](const std::string& name, const std::string& bytes) {
    return WriteFileAtomically((temp->path() / name).string(), bytes);
  };
  PSF_RETURN_IF_ERROR(write("model.safetensors", weights));
  PSF_RETURN_IF_ERROR(write("config.json", MarianConfigJson(model)));
  PSF_RETURN_IF_ERROR(write("generation_config.json", GenerationConfigJson(model)));
  PSF_RETURN_IF_ERROR(write("tokenizer_config.json", TokenizerConfigJson(model, vocabulary)));
  PSF_RETURN_IF_ERROR(write("vocab.json", VocabJson(vocabulary)));
  PSF_RETURN_IF_ERROR(write("source.spm", spm_bytes));
  PSF_RETURN_IF_ERROR(write("target.spm", spm_bytes));
  fs::path target = fs::absolute(options.out_dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "DIR/"
  PSF_RETURN_IF_ERROR(temp->RenameTo(target));
  return report;
}

}  // namespace psformer
