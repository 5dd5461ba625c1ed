#include "worker/train/trainer_state.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/write_file.h"

namespace psformer {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'F', 'T', 'R', 'A', 'I', 'N'};
constexpr uint32_t kVersion = 1;

template <typename V>
void Append(std::string* out, V value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void AppendFloats(std::string* out, const std::vector<float>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace

Status WriteTrainerState(const std::string& path, const TrainerState& state) {
  PSF_CHECK(state.params.size() == state.adam_m.size() && state.params.size() == state.adam_v.size());
  std::string bytes(kMagic, sizeof(kMagic));
  Append(&bytes, kVersion);
  const std::string config = state.model.SerializeAsString();
  Append(&bytes, static_cast<uint32_t>(config.size()));
  bytes += config;
  Append(&bytes, state.vocab_size);
  Append(&bytes, state.step);
  Append(&bytes, static_cast<uint64_t>(state.params.size()));
  AppendFloats(&bytes, state.params);
  AppendFloats(&bytes, state.adam_m);
  AppendFloats(&bytes, state.adam_v);
  Append(&bytes, Crc32c(0, bytes.data(), bytes.size()));
  return WriteFileAtomically(path, bytes);
}

StatusOr<TrainerState> ReadTrainerState(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open trainer state " + path + ": " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  auto corrupt = [&](const std::string& why) { return Status::Corruption("trainer state " + path + ": " + why); };
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (n > bytes.size() - pos) return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  };
  char magic[sizeof(kMagic)];
  uint32_t version = 0, config_size = 0;
  if (!take(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
    return corrupt("not a psformer trainer state (wrong magic number)");
  }
  if (!take(&version, sizeof(version)) || version != kVersion) return corrupt("unsupported version");
  if (!take(&config_size, sizeof(config_size)) || config_size > bytes.size() - pos) return corrupt("truncated");
  TrainerState state;
  std::string config(config_size, '\0');
  take(config.data(), config_size);
  uint64_t count = 0;
  if (!take(&state.vocab_size, sizeof(state.vocab_size)) || !take(&state.step, sizeof(state.step)) ||
      !take(&count, sizeof(count))) {
    return corrupt("truncated");
  }
  if (count > bytes.size() || bytes.size() != pos + 3 * count * sizeof(float) + sizeof(uint32_t)) {
    return corrupt("truncated or padded");
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - sizeof(stored_crc), sizeof(stored_crc));
  if (Crc32c(0, bytes.data(), bytes.size() - sizeof(stored_crc)) != stored_crc) return corrupt("checksum mismatch");
  if (!state.model.ParseFromString(config)) return corrupt("the model config cannot be parsed");
  for (std::vector<float>* v : {&state.params, &state.adam_m, &state.adam_v}) {
    v->resize(count);
    take(v->data(), count * sizeof(float));
  }
  return state;
}

}  // namespace psformer
