#include "common/model_file.h"

#include <filesystem>
#include <utility>

#include "common/binary_codec.h"
#include "common/config_loader.h"
#include "common/logging.h"
#include "common/param_layout.h"
#include "common/read_file.h"
#include "common/sha256.h"
#include "common/write_file.h"

namespace psformer {
namespace {

// What a file that is not a model is, by its first bytes, where it is another of psformer's own
// files (an easy mistake: they sit side by side in a run or corpus directory).
std::string NotAModel(const std::string& bytes) {
  const std::string head = bytes.substr(0, 8);
  if (bytes.empty()) return "it is empty, not a psformer model file";
  // The magics of worker/data/corpus_file.h, common/checkpoint/shard_file.h and
  // worker/train/trainer_state.h.
  if (head == std::string("PSFCORP\0", 8))
    return "it is a corpus file of psformer prepare (train.bin, valid.bin), not a model";
  if (head == "PSFSHARD") {
    return "it is a checkpoint's shard file, not a model; psformer average --run-dir RUN_DIR --last 1 --output FILE "
           "writes the newest checkpoint of a run as one";
  }
  if (head == "PSFTRAIN") return "it is the state of train --local (trainer_state.bin), not a model";
  return "not a psformer model file (wrong magic number)";
}

}  // namespace

Status WriteModelFile(const std::string& path, const ModelFile& file) {
  PSF_CHECK(file.params.size() == ParamLayout(file.model, file.vocab_size).total_size());
  std::string bytes;
  BinaryWriter w(StringSink(&bytes), std::string_view(kModelFileMagic, sizeof(kModelFileMagic)), kModelFileVersion);
  w.PutString(file.model.SerializeAsString());
  w.PutString(file.spm_digest);
  w.Put(file.vocab_size);
  w.Put(static_cast<uint64_t>(file.params.size()));
  w.PutArray(file.params.data(), file.params.size());
  PSF_RETURN_IF_ERROR(w.Finish());
  return WriteFileAtomically(path, bytes);
}

StatusOr<ModelFile> ReadModelFile(const std::string& path) {
  auto read =
      ReadFileBytes(path, "model file", kAnyFileSize, std::string_view(kModelFileMagic, sizeof(kModelFileMagic)));
  if (!read.ok()) {
    // A run's model.bin before the run has ended: say so, and how to get a model of it now.
    const std::filesystem::path file(path);
    const std::filesystem::path run = file.parent_path().empty() ? "." : file.parent_path();
    std::error_code ec;
    if (read.status().IsNotFound() && file.filename() == "model.bin" &&
        std::filesystem::is_regular_file(run / "config.pbtxt", ec) &&
        std::filesystem::is_directory(run / "checkpoints", ec)) {
      return Status::NotFound(read.status().message() + "; the run in " + run.string() +
                              " writes it when its training ends (`psformer status " + run.string() +
                              "` says where it stands); for a model of its newest checkpoints now: psformer average "
                              "--run-dir " +
                              run.string() + " --output FILE");
    }
    return read.status();
  }
  const std::string bytes = std::move(read).value();
  auto corrupt = [&](const std::string& why) { return Status::Corruption("model file " + path + ": " + why); };

  BinaryReader r(bytes);
  if (!r.HasMagic(std::string_view(kModelFileMagic, sizeof(kModelFileMagic)))) {
    return corrupt(NotAModel(bytes));
  }
  uint32_t version = 0;
  if (!r.Get(&version)) return corrupt("truncated in the header");
  if (version < kModelFileFirstVersion || version > kModelFileVersion) {
    return corrupt("version " + std::to_string(version) + " is not supported (this build reads versions " +
                   std::to_string(kModelFileFirstVersion) + " to " + std::to_string(kModelFileVersion) + ")");
  }
  ModelFile file;
  std::string config;
  if (!r.GetString(&config)) return corrupt("truncated in the model config");
  if (version >= 2 && !r.GetString(&file.spm_digest)) return corrupt("truncated in the SentencePiece digest");
  uint64_t count = 0;
  if (!r.Get(&file.vocab_size) || !r.Get(&count)) return corrupt("truncated in the header");
  const size_t expected_size = r.position() + count * sizeof(float) + sizeof(uint32_t);
  if (count > bytes.size() || bytes.size() != expected_size) {
    return corrupt("size " + std::to_string(bytes.size()) + " bytes, but its header says " + std::to_string(count) +
                   " parameters (" + std::to_string(expected_size) + " bytes): truncated or padded");
  }
  if (!r.ChecksumMatches()) return corrupt("checksum mismatch (the file is corrupt)");
  if (!file.model.ParseFromString(config)) return corrupt("the model config cannot be parsed");
  if (file.vocab_size <= 4) return corrupt("vocabulary size " + std::to_string(file.vocab_size) + " is invalid");
  // A readable file with a config no model can have (its checksum made over the wrong values) is
  // refused here, not by a check inside the model that aborts.
  if (const Status valid = ValidateModelConfig(file.model); !valid.ok()) {
    return corrupt("its model config is invalid: " + valid.message());
  }
  const uint64_t layout_size = ParamLayout(file.model, file.vocab_size).total_size();
  if (layout_size != count) {
    return corrupt("holds " + std::to_string(count) + " parameters but its model config needs " +
                   std::to_string(layout_size));
  }
  file.params.resize(count);
  r.GetArray(file.params.data(), count);
  return file;
}

std::string SentencePieceDigest(std::string_view spm_bytes) { return Sha256Hex(spm_bytes.data(), spm_bytes.size()); }

StatusOr<std::string> TrainingSentencePieceDigest(const proto::JobConfig& config) {
  // The copy task has no SentencePiece model, and emulated workers read no corpus (the config's
  // train_dir need not exist): their models record none.
  if (config.data().task() != proto::DataConfig::CORPUS ||
      config.cluster().backend() == proto::ClusterConfig::EMULATED) {
    return std::string();
  }
  const std::string path = (std::filesystem::path(config.data().train_dir()) / "spm.model").string();
  PSF_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path, "SentencePiece model", kMaxSentencePieceBytes));
  return SentencePieceDigest(bytes);
}

Status PinSentencePiece(proto::JobConfig* config) {
  PSF_ASSIGN_OR_RETURN(const std::string digest, TrainingSentencePieceDigest(*config));
  if (digest.empty()) return Status::Ok();
  const std::string& pinned = config->data().spm_sha256();
  if (pinned.empty()) {
    config->mutable_data()->set_spm_sha256(digest);
    return Status::Ok();
  }
  if (pinned == digest) return Status::Ok();
  const std::string path = (std::filesystem::path(config->data().train_dir()) / "spm.model").string();
  return Status::InvalidArgument(path + " is not the SentencePiece model the run trains with (its SHA-256 is " +
                                 digest.substr(0, 12) + "..., data.spm_sha256 " + pinned.substr(0, 12) +
                                 "...): the corpus was prepared again, and its ids would mean other pieces; train "
                                 "on the corpus the run began with, or start a new run");
}

Status CheckSentencePiece(const ModelFile& file, const std::string& model_path, std::string_view spm_bytes,
                          const std::string& spm_path, std::string* warning) {
  if (file.spm_digest.empty()) {
    *warning = model_path +
               " records no SentencePiece model (written by an older psformer, or trained without one), "
               "so " +
               spm_path + " is checked by its size only: make sure it is the model's own";
    return Status::Ok();
  }
  const std::string digest = SentencePieceDigest(spm_bytes);
  if (digest == file.spm_digest) return Status::Ok();
  return Status::InvalidArgument("SentencePiece model mismatch: " + spm_path + " (SHA-256 " + digest.substr(0, 12) +
                                 "...) is not the one " + model_path + " was trained with (SHA-256 " +
                                 file.spm_digest.substr(0, 12) +
                                 "...): its ids would decode into other pieces. Pass the spm.model of the corpus "
                                 "directory the model was trained on");
}

StatusOr<std::string> SentencePieceOfRun(const std::string& model_path) {
  const std::string give = "; give --spm SPM, the spm.model of the corpus the model was trained on";
  std::filesystem::path run_dir = std::filesystem::path(model_path).parent_path();
  if (run_dir.empty()) run_dir = ".";
  const std::string config_path = (run_dir / "config.pbtxt").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec)) {
    return Status::InvalidArgument("no --spm, and " + model_path +
                                   " is not in a run directory (no config.pbtxt beside it) to take it from" + give);
  }
  StatusOr<JobConfig> config = LoadRunConfigFile(config_path);
  if (!config.ok()) {
    return Status::InvalidArgument(
        "no --spm, and the run's config to take it from cannot be read: " + config.status().message() + give);
  }
  const std::string& train_dir = config->data().train_dir();
  if (config->data().task() == proto::DataConfig::COPY || train_dir.empty()) {
    return Status::InvalidArgument(
        "no --spm, and " + config_path +
        " trains the copy task, which has no SentencePiece model (its models copy ids, not text)");
  }
  const std::string spm_path = (std::filesystem::path(train_dir) / "spm.model").string();
  if (!std::filesystem::is_regular_file(spm_path, ec)) {
    return Status::InvalidArgument("no --spm, and the run's SentencePiece model, " + spm_path +
                                   " (data.train_dir = \"" + train_dir + "\" of " + config_path + "), is not there" +
                                   (std::filesystem::path(train_dir).is_relative()
                                        ? " (a relative train_dir is read from the current directory, as the job did)"
                                        : "") +
                                   give);
  }
  return spm_path;
}

}  // namespace psformer
