#include "worker/train/trainer_state.h"

#include "common/binary_codec.h"
#include "common/logging.h"
#include "common/model_file.h"
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

StatusOr<TrainerState> ReadTrainerState(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(const std::string bytes, ReadBinaryFile(path, "trainer state"));
  auto corrupt = [&](const std::string& why) { return Status::Corruption("trainer state " + path + ": " + why); };
  BinaryReader r(bytes);
  if (!r.HasMagic(std::string_view(kMagic, sizeof(kMagic)))) {
    return corrupt("not a psformer trainer state (wrong magic number)");
  }
  uint32_t version = 0;
  if (!r.Get(&version) || version != kVersion) return corrupt("unsupported version");
  TrainerState state;
  std::string config;
  uint64_t count = 0;
  if (!r.GetString(&config) || !r.Get(&state.vocab_size) || !r.Get(&state.step) || !r.Get(&count)) {
    return corrupt("truncated");
  }
  if (count > bytes.size() || bytes.size() != r.position() + 3 * count * sizeof(float) + sizeof(uint32_t)) {
    return corrupt("truncated or padded");
  }
  if (!r.ChecksumMatches()) return corrupt("checksum mismatch");
  if (!state.model.ParseFromString(config)) return corrupt("the model config cannot be parsed");
  for (std::vector<float>* v : {&state.params, &state.adam_m, &state.adam_v}) {
    v->resize(count);
    r.GetArray(v->data(), count);
  }
  return state;
}

}  // namespace psformer
