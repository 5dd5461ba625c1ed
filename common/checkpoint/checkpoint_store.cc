#include "common/checkpoint/checkpoint_store.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/clock_text.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/proto/checkpoint.pb.h"
#include "common/write_file.h"

namespace psformer {
namespace fs = std::filesystem;
namespace {

constexpr char kManifest[] = "manifest.pbtxt";

std::string NowIso8601() { return ClockText(std::time(nullptr), "%Y-%m-%dT%H:%M:%SZ", TimeZone::kUtc); }

// The CRC-32C of a whole shard file, from its trailer: the last 4 bytes are the CRC of all bytes
// before them, and a CRC extends over more bytes, so the whole file's CRC needs no second pass.
StatusOr<uint32_t> WholeFileCrcFromTrailer(const std::string& path, uint64_t bytes) {
  if (bytes < 4) return Status::Corruption("shard file " + path + " is truncated");
  std::ifstream in(path, std::ios::binary);
  uint32_t stored = 0;
  in.seekg(static_cast<std::streamoff>(bytes - 4));
  if (!in.read(reinterpret_cast<char*>(&stored), 4)) return Status::IoError("cannot read " + path);
  return Crc32c(stored, &stored, 4);
}

}  // namespace

uint64_t ModelConfigDigest(const proto::JobConfig& config, int vocab_size) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    config.model().SerializeToCodedStream(&out);
  }
  const uint32_t lo = Crc32c(0, bytes.data(), bytes.size());
  const uint32_t hi = Crc32c(lo ^ 0x9e3779b9u, &vocab_size, sizeof(vocab_size));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

std::string CheckpointDir(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return (fs::path(run_dir) / "checkpoints" / name).string();
}

std::string ShardFileName(int shard, int shards) {
  char name[48];
  std::snprintf(name, sizeof(name), "shard-%04d-of-%04d.bin", shard, shards);
  return name;
}

std::vector<int64_t> ListCheckpointSteps(const std::string& run_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    long long step = 0;
    char tail = 0;
    if (entry.is_directory() && std::sscanf(name.c_str(), "step-%lld%c", &step, &tail) == 1) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

StatusOr<bool> WriteManifestIfComplete(const std::string& run_dir, int64_t step, const CheckpointIdentity& id) {
  const fs::path dir = CheckpointDir(run_dir, step);
  proto::CheckpointManifest manifest;
  manifest.set_step(step);
  manifest.set_parameter_count(id.parameter_count);
  manifest.set_config_digest(id.config_digest);
  if (id.spread_layers) manifest.set_spread_layers(true);
  for (int size : id.host_groups) manifest.add_host_groups(size);
  manifest.set_created_at(NowIso8601());
  uint64_t begin = 0;
  for (int k = 0; k < id.shards; ++k) {
    const fs::path file = dir / ShardFileName(k, id.shards);
    std::error_code ec;
    const uint64_t bytes = fs::file_size(file, ec);
    if (ec) return false;  // another shard has not written yet; it will write the manifest.
    PSF_ASSIGN_OR_RETURN(uint32_t crc, WholeFileCrcFromTrailer(file.string(), bytes));
    proto::ShardFile* sf = manifest.add_shards();
    const uint64_t n = id.parameter_count / id.shards + (static_cast<uint64_t>(k) < id.parameter_count % id.shards);
    sf->set_shard(k);
    sf->set_begin(begin);
    sf->set_end(begin + n);
    sf->set_file(file.filename().string());
    sf->set_bytes(bytes);
    sf->set_crc32c(crc);
    begin += n;
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(manifest, &text);
  PSF_RETURN_IF_ERROR(WriteCheckpointFileAtomically((dir / kManifest).string(), text));
  return true;
}

bool IsCheckpointFileName(const std::string& name) {
  std::string base = name;
  if (const size_t at = base.rfind(".tmp-"); at != std::string::npos && at + 5 < base.size() &&
                                             base.find_first_not_of("0123456789", at + 5) == std::string::npos) {
    base.resize(at);
  }
  const auto ends_with = [&](const std::string& suffix) {
    return base.size() >= suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return base == kManifest || (base.rfind("shard-", 0) == 0 && ends_with(".bin"));
}

namespace {

// An old checkpoint's files go; the directory too once nothing else is in it. Anything a user
// put there (notes, an export) stays with it, said once: when this prune removed the files.
void PruneCheckpoint(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> ours;
  std::string others;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code kind;
    if (entry.is_regular_file(kind) && IsCheckpointFileName(name)) {
      ours.push_back(entry.path());
    } else {
      others += (others.empty() ? "" : ", ") + name;
    }
  }
  if (ec) {
    PSF_LOG(Warning) << "cannot list old checkpoint " << dir.string() << ": " << ec.message();
    return;
  }
  for (const fs::path& file : ours) {
    if (fs::remove(file, ec); ec) {
      PSF_LOG(Warning) << "cannot remove old checkpoint file " << file.string() << ": " << ec.message();
      return;
    }
  }
  if (others.empty()) {
    if (fs::remove(dir, ec); ec)
      PSF_LOG(Warning) << "cannot remove old checkpoint " << dir.string() << ": " << ec.message();
  } else if (!ours.empty()) {
    PSF_LOG(Warning) << "removed the old checkpoint's files from " << dir.string()
                     << " but kept the directory: it holds " << others << ", which no checkpoint writes";
  }
}

}  // namespace

Status SaveShardCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, const ShardCheckpointView& shard,
                           int keep_last) {
  const fs::path dir = CheckpointDir(run_dir, shard.step);
  PSF_RETURN_IF_ERROR(MakeDirectoriesInRun(run_dir, dir.string()));
  if (Status written = WriteShardFile((dir / ShardFileName(shard.shard, id.shards)).string(), shard); !written.ok()) {
    // A directory that holds nothing (no other shard wrote into it) is no checkpoint: it goes, so
    // that the run shows none for this step. fs::remove takes only an empty one.
    std::error_code ec;
    fs::remove(dir, ec);
    return written;
  }
  PSF_ASSIGN_OR_RETURN(bool wrote, WriteManifestIfComplete(run_dir, shard.step, id));
  if (!wrote || keep_last <= 0) return Status::Ok();
  // Only the manifest writer prunes, and only checkpoints older than the newest keep_last
  // complete ones, so no checkpoint a resume could still need goes away.
  int complete = 0;
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    const fs::path old = CheckpointDir(run_dir, step);
    if (step > shard.step) continue;
    if (complete < keep_last) {
      if (CheckCheckpointFiles(run_dir, step).ok()) ++complete;
      continue;
    }
    PruneCheckpoint(old);
  }
  return Status::Ok();
}

namespace {

// The first parse error of a manifest, "LINE:COLUMN: what".
struct ManifestErrors : google::protobuf::io::ErrorCollector {
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first.empty()) first = std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  std::string first;
};

StatusOr<proto::CheckpointManifest> ReadManifest(const fs::path& dir) {
  auto text = ReadCheckpointFile((dir / kManifest).string());
  if (!text.ok()) return Status::NotFound("checkpoint " + dir.string() + " has no manifest (incomplete)");
  proto::CheckpointManifest manifest;
  // Parsed with a collector of its own: protobuf's default logs "[libprotobuf ERROR ...]" to the
  // console without naming the file, and the caller says better what follows.
  ManifestErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, &manifest)) {
    return Status::Corruption("manifest " + (dir / kManifest).string() + " does not parse (" + errors.first + ")");
  }
  return manifest;
}

// Each shard file the manifest lists is there with the listed size.
Status CheckShardSizes(const fs::path& dir, const proto::CheckpointManifest& manifest) {
  for (const proto::ShardFile& sf : manifest.shards()) {
    std::error_code ec;
    const uint64_t bytes = fs::file_size(dir / sf.file(), ec);
    if (ec) return Status::Corruption("checkpoint " + dir.string() + ": missing " + sf.file());
    if (bytes != sf.bytes()) {
      return Status::Corruption((dir / sf.file()).string() + " has " + std::to_string(bytes) +
                                " bytes, manifest says " + std::to_string(sf.bytes()));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckCheckpointFiles(const std::string& run_dir, int64_t step) {
  const fs::path dir = CheckpointDir(run_dir, step);
  PSF_ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest, ReadManifest(dir));
  if (manifest.step() != step || manifest.shards_size() == 0) {
    return Status::Corruption("manifest of " + dir.string() + " describes another checkpoint (step or no shards)");
  }
  return CheckShardSizes(dir, manifest);
}

std::optional<int64_t> NewestCompleteCheckpointStep(const std::string& run_dir) {
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    if (CheckCheckpointFiles(run_dir, step).ok()) return step;
  }
  return std::nullopt;
}

Status VerifyCheckpoint(const std::string& run_dir, int64_t step, const CheckpointIdentity& id) {
  const fs::path dir = CheckpointDir(run_dir, step);
  PSF_ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest, ReadManifest(dir));
  if (manifest.step() != step || manifest.parameter_count() != id.parameter_count ||
      manifest.shards_size() != id.shards) {
    return Status::Corruption("manifest of " + dir.string() + " describes another job (step, size or shard count)");
  }
  if (manifest.config_digest() != id.config_digest) {
    return Status::InvalidArgument("checkpoint " + dir.string() + " was written for another model config");
  }
  if (manifest.spread_layers() != id.spread_layers) {
    const auto layout = [](bool spread) { return spread ? "layers spread over the servers" : "contiguous shards"; };
    return Status::InvalidArgument("checkpoint " + dir.string() + " was written with " +
                                   layout(manifest.spread_layers()) + ", this job has " + layout(id.spread_layers) +
                                   " (cluster.spread_layers must stay as it was)");
  }
  if (std::vector<int>(manifest.host_groups().begin(), manifest.host_groups().end()) != id.host_groups) {
    const auto groups = [](const auto& sizes) {
      std::string text;
      for (int size : sizes) text += (text.empty() ? "" : ", ") + std::to_string(size);
      return sizes.empty() ? std::string("no host groups (the flat path)") : "host groups [" + text + "]";
    };
    return Status::InvalidArgument("checkpoint " + dir.string() + " was written with " +
                                   groups(manifest.host_groups()) + ", this job has " + groups(id.host_groups) +
                                   " (they fix the order of every sum; set cluster.host_groups and "
                                   "cluster.host_summing as they were: any grouping runs on one node)");
  }
  PSF_RETURN_IF_ERROR(CheckShardSizes(dir, manifest));
  for (const proto::ShardFile& sf : manifest.shards()) {
    const std::string path = (dir / sf.file()).string();
    auto bytes = ReadCheckpointFile(path);
    if (!bytes.ok() || bytes->size() != sf.bytes()) return Status::Corruption("cannot read all of " + path);
    if (Crc32c(0, bytes->data(), bytes->size()) != sf.crc32c()) {
      return Status::Corruption(path + ": checksum differs from the manifest's");
    }
  }
  return Status::Ok();
}

StatusOr<ShardCheckpoint> LoadShardCheckpoint(const std::string& run_dir, const CheckpointIdentity& id, int shard,
                                              int64_t step) {
  PSF_RETURN_IF_ERROR(VerifyCheckpoint(run_dir, step, id));
  const std::string path = (fs::path(CheckpointDir(run_dir, step)) / ShardFileName(shard, id.shards)).string();
  PSF_ASSIGN_OR_RETURN(ShardCheckpoint loaded, ReadShardFile(path));
  if (loaded.shard != shard || loaded.step != step) return Status::Corruption(path + " holds another shard or step");
  return loaded;
}

StatusOr<std::optional<ShardCheckpoint>> LoadNewestShardCheckpoint(const std::string& run_dir,
                                                                   const CheckpointIdentity& id, int shard) {
  for (int64_t step : ListCheckpointSteps(run_dir)) {
    auto loaded = LoadShardCheckpoint(run_dir, id, shard, step);
    if (loaded.ok()) return std::optional<ShardCheckpoint>(std::move(loaded).value());
    const Status& s = loaded.status();
    if (s.IsInvalidArgument()) return s;  // another model: resuming would be wrong.
    PSF_LOG(Warning) << "skipping checkpoint at step " << step << ": " << s.message()
                     << "; falling back to the previous one";
  }
  return std::optional<ShardCheckpoint>();
}

}  // namespace psformer
