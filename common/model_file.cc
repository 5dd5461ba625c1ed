#include "common/model_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/param_layout.h"
#include "common/write_file.h"

namespace psformer {
namespace {

template <typename V>
void Append(std::string* out, V value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads fixed-size values from a byte string, remembering whether it ran past the end.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool Take(void* dst, size_t n) {
    if (n > bytes_.size() - pos_) return false;
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

}  // namespace

Status WriteModelFile(const std::string& path, const ModelFile& file) {
  PSF_CHECK(file.params.size() == ParamLayout(file.model, file.vocab_size).total_size());
  std::string bytes(kModelFileMagic, sizeof(kModelFileMagic));
  Append(&bytes, kModelFileVersion);
  const std::string config = file.model.SerializeAsString();
  Append(&bytes, static_cast<uint32_t>(config.size()));
  bytes += config;
  Append(&bytes, file.vocab_size);
  Append(&bytes, static_cast<uint64_t>(file.params.size()));
  bytes.append(reinterpret_cast<const char*>(file.params.data()), file.params.size() * sizeof(float));
  Append(&bytes, Crc32c(0, bytes.data(), bytes.size()));
  return WriteFileAtomically(path, bytes);
}

StatusOr<ModelFile> ReadModelFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open model file " + path + ": " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  auto corrupt = [&](const std::string& why) { return Status::Corruption("model file " + path + ": " + why); };

  Reader r(bytes);
  char magic[sizeof(kModelFileMagic)];
  if (!r.Take(magic, sizeof(magic)) || std::memcmp(magic, kModelFileMagic, sizeof(magic)) != 0) {
    return corrupt("not a psformer model file (wrong magic number)");
  }
  uint32_t version = 0, config_size = 0;
  if (!r.Take(&version, sizeof(version))) return corrupt("truncated in the header");
  if (version != kModelFileVersion) {
    return corrupt("version " + std::to_string(version) + " is not supported (this build reads version " +
                   std::to_string(kModelFileVersion) + ")");
  }
  if (!r.Take(&config_size, sizeof(config_size)) || config_size > bytes.size() - r.pos()) {
    return corrupt("truncated in the model config");
  }
  ModelFile file;
  std::string config(config_size, '\0');
  r.Take(config.data(), config_size);
  uint64_t count = 0;
  if (!r.Take(&file.vocab_size, sizeof(file.vocab_size)) || !r.Take(&count, sizeof(count))) {
    return corrupt("truncated in the header");
  }
  const size_t expected_size = r.pos() + count * sizeof(float) + sizeof(uint32_t);
  if (count > bytes.size() || bytes.size() != expected_size) {
    return corrupt("size " + std::to_string(bytes.size()) + " bytes, but its header says " + std::to_string(count) +
                   " parameters (" + std::to_string(expected_size) + " bytes): truncated or padded");
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - sizeof(stored_crc), sizeof(stored_crc));
  if (Crc32c(0, bytes.data(), bytes.size() - sizeof(stored_crc)) != stored_crc) {
    return corrupt("checksum mismatch (the file is corrupt)");
  }
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
  r.Take(file.params.data(), count * sizeof(float));
  return file;
}

}  // namespace psformer
