// The exported model file (RUN_DIR/model.bin): what `psformer translate` loads and
// `psformer checksum` digests. Little-endian, in this order:
//   magic "PSFMODEL" (8 bytes), version (u32 = 1),
//   model config length (u32) and the proto::ModelConfig in protobuf binary form,
//   vocabulary size (i32), parameter count (u64), the parameters (count x fp32, the flat vector
//   of common/param_layout.h), CRC-32C (u32) of every byte before it.
// Written to a temporary name, fsynced and renamed, so a reader never sees a partial file.
#ifndef PSFORMER_COMMON_MODEL_FILE_H_
#define PSFORMER_COMMON_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

constexpr char kModelFileMagic[8] = {'P', 'S', 'F', 'M', 'O', 'D', 'E', 'L'};
constexpr uint32_t kModelFileVersion = 1;

struct ModelFile {
  proto::ModelConfig model;
  int32_t vocab_size = 0;
  std::vector<float> params;
};

// REQUIRES: params.size() equals ParamLayout(model, vocab_size).total_size().
Status WriteModelFile(const std::string& path, const ModelFile& file);

// Reads and checks a model file: magic, version, sizes, CRC, and that the parameter count
// matches the layout of the stored config. Errors name the file and what is wrong.
StatusOr<ModelFile> ReadModelFile(const std::string& path);

}  // namespace psformer

#endif  // PSFORMER_COMMON_MODEL_FILE_H_
