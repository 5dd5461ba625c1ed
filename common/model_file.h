// The exported model file (RUN_DIR/model.bin): what `psformer translate` loads and
// `psformer checksum` digests. Little-endian, in this order:
//   magic "PSFMODEL" (8 bytes), version (u32 = 2),
//   model config length (u32) and the proto::ModelConfig in protobuf binary form,
//   (version 2) SentencePiece digest length (u32) and the digest (SentencePieceDigest: 64 hex
//   digits; empty for a model trained without one, the copy task),
//   vocabulary size (i32), parameter count (u64), the parameters (count x fp32, the flat vector
//   of common/param_layout.h), CRC-32C (u32) of every byte before it.
// Version 1 files (no digest) are still read. The digest is what lets `translate` and `export`
// refuse another corpus's SentencePiece model of the same size, which would decode every id
// into the wrong piece (CheckSentencePiece).
// Written to a temporary name, fsynced and renamed, so a reader never sees a partial file.
#ifndef PSFORMER_COMMON_MODEL_FILE_H_
#define PSFORMER_COMMON_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

constexpr char kModelFileMagic[8] = {'P', 'S', 'F', 'M', 'O', 'D', 'E', 'L'};
constexpr uint32_t kModelFileVersion = 2;
constexpr uint32_t kModelFileFirstVersion = 1;  // the oldest this build still reads

struct ModelFile {
  proto::ModelConfig model;
  int32_t vocab_size = 0;
  // SentencePieceDigest of the model's SentencePiece model; "" = not recorded (a version 1 file,
  // or a model trained without one).
  std::string spm_digest;
  std::vector<float> params;
};

// REQUIRES: params.size() equals ParamLayout(model, vocab_size).total_size().
Status WriteModelFile(const std::string& path, const ModelFile& file);

// Reads and checks a model file: magic, version, sizes, CRC, and that the parameter count
// matches the layout of the stored config. Errors name the file and what is wrong.
StatusOr<ModelFile> ReadModelFile(const std::string& path);

// The digest a model records of its SentencePiece model: SHA-256 (lower-case hex) of the
// model file's bytes.
std::string SentencePieceDigest(std::string_view spm_bytes);

// The digest of the SentencePiece model `config` trains with (data.train_dir/spm.model), or ""
// for a task without one (COPY). Errors name the file that cannot be read.
StatusOr<std::string> TrainingSentencePieceDigest(const proto::JobConfig& config);

// Fills in data.spm_sha256 from the SentencePiece model `config` trains with when it is empty;
// when it is set (a resumed run's), checks that model against it: InvalidArgument naming the
// file when it is another (a corpus prepared again, whose ids mean other pieces). Nothing for a
// task without one.
Status PinSentencePiece(proto::JobConfig* config);

// Whether `spm_bytes` (read from `spm_path`) is the SentencePiece model `file` (read from
// `model_path`) was trained with. InvalidArgument naming both files when the digests differ.
// A file that records no digest passes, and `*warning` says that it could not be checked.
Status CheckSentencePiece(const ModelFile& file, const std::string& model_path, std::string_view spm_bytes,
                          const std::string& spm_path, std::string* warning);

// The SentencePiece model a model file was trained with, found from its run directory: what
// `psformer translate` and `psformer export` use when --spm is not given. A model in a run
// directory (RUN_DIR/model.bin, or `psformer average` output written there) lies beside the
// run's config.pbtxt, whose corpus holds it: data.train_dir/spm.model (a relative train_dir is
// taken from the current directory, as the job that wrote it did). Whether it is the right one
// is still for CheckSentencePiece to say. InvalidArgument saying why there is none to take and
// asking for --spm.
StatusOr<std::string> SentencePieceOfRun(const std::string& model_path);

}  // namespace psformer

#endif  // PSFORMER_COMMON_MODEL_FILE_H_
