#include "common/model_file.h"

#include "common/binary_codec.h"
#include "common/logging.h"
#include "common/param_layout.h"
#include "common/write_file.h"

namespace psformer {

Status WriteModelFile(const std::string& path, const ModelFile& file) {
  PSF_CHECK(file.params.size() == ParamLayout(file.model, file.vocab_size).total_size());
  std::string bytes;
  BinaryWriter w(StringSink(&bytes), std::string_view(kModelFileMagic, sizeof(kModelFileMagic)), kModelFileVersion);
  w.PutString(file.model.SerializeAsString());
  w.Put(file.vocab_size);
  w.Put(static_cast<uint64_t>(file.params.size()));
  w.PutArray(file.params.data(), file.params.size());
  PSF_RETURN_IF_ERROR(w.Finish());
  return WriteFileAtomically(path, bytes);
}

StatusOr<ModelFile> ReadModelFile(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(const std::string bytes, ReadBinaryFile(path, "model file"));
  auto corrupt = [&](const std::string& why) { return Status::Corruption("model file " + path + ": " + why); };

  BinaryReader r(bytes);
  if (!r.HasMagic(std::string_view(kModelFileMagic, sizeof(kModelFileMagic)))) {
    return corrupt("not a psformer model file (wrong magic number)");
  }
  uint32_t version = 0;
  if (!r.Get(&version)) return corrupt("truncated in the header");
  if (version != kModelFileVersion) {
    return corrupt("version " + std::to_string(version) + " is not supported (this build reads version " +
                   std::to_string(kModelFileVersion) + ")");
  }
  ModelFile file;
  std::string config;
  if (!r.GetString(&config)) return corrupt("truncated in the model config");
  uint64_t count = 0;
  if (!r.Get(&file.vocab_size) || !r.Get(&count)) return corrupt("truncated in the header");
  const size_t expected_size = r.position() + count * sizeof(float) + sizeof(uint32_t);
  if (count > bytes.size() || bytes.size() != expected_size) {
    return corrupt("size " + std::to_string(bytes.size()) + " bytes, but its header says " + std::to_string(count) +
                   " parameters (" + std::to_string(expected_size) + " bytes): truncated or padded");
  }
  if (!r.ChecksumMatches()) return corrupt("checksum mismatch (the file is corrupt)");
  if (!file.model.ParseFromString(config)) return corrupt("the model config cannot be parsed");
  if (file.vocab_size <= 0 || file.model.d_model() <= 0 || file.model.layers() <= 0 || file.model.d_ff() <= 0) {
    return corrupt("the model config or vocabulary size is invalid");
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

}  // namespace psformer
