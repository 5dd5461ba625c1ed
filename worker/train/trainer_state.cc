#include "worker/train/trainer_state.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/binary_codec.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/read_file.h"
#include "common/write_file.h"

namespace psformer {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'F', 'T', 'R', 'A', 'I', 'N'};
constexpr uint32_t kVersion = 1;

}  // namespace

Status WriteTrainerState(const std::string& path, const TrainerState& state) {
  PSF_CHECK(state.params.size() == state.adam_m.size() && state.params.size() == state.adam_v.size());
  std::string bytes;
  BinaryWriter w(StringSink(&bytes), std::string_view(kMagic, sizeof(kMagic)), kVersion);
  w.PutString(state.model.SerializeAsString());
  w.Put(state.vocab_size);
  w.Put(state.step);
  w.Put(static_cast<uint64_t>(state.params.size()));
  for (const std::vector<float>* v : {&state.params, &state.adam_m, &state.adam_v}) w.PutArray(v->data(), v->size());
  PSF_RETURN_IF_ERROR(w.Finish());
  return WriteFileAtomically(path, bytes);
}

namespace {

Status Corrupt(const std::string& path, const std::string& why) {
  return Status::Corruption("trainer state " + path + ": " + why);
}

// Reads the header of a state file of `file_size` bytes from `r` (the file, or its beginning)
// into `state` (but the arrays), `config` and `count`, and checks the file holds as many bytes
// as the header says.
Status ReadHeader(const std::string& path, uint64_t file_size, BinaryReader& r, TrainerState* state,
                  std::string* config, uint64_t* count) {
  if (!r.HasMagic(std::string_view(kMagic, sizeof(kMagic)))) {
    return Corrupt(path, "not a psformer trainer state (wrong magic number)");
  }
  uint32_t version = 0;
  if (!r.Get(&version) || version != kVersion) return Corrupt(path, "unsupported version");
  if (!r.GetString(config) || !r.Get(&state->vocab_size) || !r.Get(&state->step) || !r.Get(count)) {
    return Corrupt(path, "truncated");
  }
  if (*count > file_size || file_size != r.position() + 3 * *count * sizeof(float) + sizeof(uint32_t)) {
    return Corrupt(path, "truncated or padded");
  }
  return Status::Ok();
}

}  // namespace

Status CheckTrainerStateFile(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::IoError("trainer state " + path + ": " + ec.message());
  // The header: the model config is a few hundred bytes.
  constexpr uint64_t kHeaderAtMost = 1 << 20;
  std::string head(static_cast<size_t>(std::min(size, kHeaderAtMost)), '\0');
  std::ifstream in(path, std::ios::binary);
  if (!in.read(head.data(), static_cast<std::streamsize>(head.size()))) {
    return Status::IoError("cannot read trainer state " + path);
  }
  BinaryReader r(head);
  TrainerState state;
  std::string config;
  uint64_t count = 0;
  return ReadHeader(path, size, r, &state, &config, &count);
}

StatusOr<TrainerState> ReadTrainerState(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(const std::string bytes,
                       ReadFileBytes(path, "trainer state", kAnyFileSize, std::string_view(kMagic, sizeof(kMagic))));
  auto corrupt = [&](const std::string& why) { return Corrupt(path, why); };
  BinaryReader r(bytes);
  TrainerState state;
  std::string config;
  uint64_t count = 0;
  PSF_RETURN_IF_ERROR(ReadHeader(path, bytes.size(), r, &state, &config, &count));
  if (!r.ChecksumMatches()) return corrupt("checksum mismatch");
  if (!state.model.ParseFromString(config)) return corrupt("the model config cannot be parsed");
  for (std::vector<float>* v : {&state.params, &state.adam_m, &state.adam_v}) {
    v->resize(count);
    r.GetArray(v->data(), count);
  }
  return state;
}

}  // namespace psformer
