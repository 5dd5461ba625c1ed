#include "launcher/run_files.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "common/checkpoint/checkpoint_store.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;

// The folders psformer makes, each with its own names (run_files.h lists them).
enum class Folder { kTop, kCheckpoints, kCheckpointStep, kEpochs, kLogs, kTensorboard, kValidBleu, kIpc };

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// `prefix` + digits + `suffix`: "step-00000010", "pserver-3.log".
bool Numbered(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (!StartsWith(name, prefix) || !EndsWith(name, suffix) || name.size() < prefix.size() + suffix.size()) {
    return false;
  }
  return AllDigits(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
}

// A file's name without the suffix of an unfinished atomic write (".tmp", ".tmp.PID", and the
// checkpoint shards' ".tmp-PID").
std::string WithoutTemporarySuffix(const std::string& name) {
  const size_t at = name.rfind(".tmp");
  if (at == std::string::npos || at == 0) return name;
  const std::string tail = name.substr(at + 4);
  if (tail.empty() || ((tail[0] == '.' || tail[0] == '-') && AllDigits(tail.substr(1)))) return name.substr(0, at);
  return name;
}

std::optional<Folder> Subfolder(Folder parent, const std::string& name) {
  switch (parent) {
    case Folder::kTop:
      if (name == "checkpoints") return Folder::kCheckpoints;
      if (name == "logs") return Folder::kLogs;
      if (name == "tensorboard") return Folder::kTensorboard;
      if (name == "valid_bleu") return Folder::kValidBleu;
      if (name == "ipc") return Folder::kIpc;
      return std::nullopt;
    case Folder::kCheckpoints:
      if (Numbered(name, "step-", "")) return Folder::kCheckpointStep;
      if (name == "epochs") return Folder::kEpochs;
      return std::nullopt;
    case Folder::kTensorboard:
      if (Numbered(name, "server-", "")) return Folder::kTensorboard;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool IsRunFile(Folder folder, const std::string& file) {
  const std::string name = WithoutTemporarySuffix(file);
  switch (folder) {
    case Folder::kTop:
      return name == "config.pbtxt" || name == "model.bin" || name == "metrics.jsonl" || name == "trainer_state.bin" ||
             name == "plot.png";
    case Folder::kCheckpointStep:
      return IsCheckpointFileName(name);
    case Folder::kEpochs:
      return AllDigits(name);
    case Folder::kLogs:
      return name == "supervisor.log" || name == "trainer.log" || name == "launch.log" ||
             Numbered(name, "supervisor-", ".log") || Numbered(name, "pserver-", ".log") ||
             Numbered(name, "worker-", ".log") || Numbered(name, "aggregator-", ".log");
    case Folder::kTensorboard:
      return StartsWith(name, "events.out.tfevents.");
    case Folder::kValidBleu:
      return name == "reference.txt" || Numbered(name, "step-", ".hyp");
    case Folder::kIpc:
      return Numbered(name, "pserver-", ".sock") || Numbered(name, "pserver-", ".sock.link") ||
             Numbered(name, "aggregator-", ".sock");
    default:
      return false;
  }
}

// Removes psformer's entries of `path` (a folder of kind `folder`, named `relative` in the
// message); true when it removed everything in it.
StatusOr<bool> Clear(const fs::path& path, Folder folder, const std::string& relative, ClearedRun* cleared) {
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (const auto& entry : fs::directory_iterator(path, ec)) entries.push_back(entry);
  if (ec) return Status::IoError("--overwrite: cannot list " + path.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  bool everything = true;
  for (const fs::directory_entry& entry : entries) {
    const std::string name = entry.path().filename().string();
    const std::string shown = relative + name;
    if (folder == Folder::kTop && name == ".lock") continue;
    const bool is_dir = entry.is_directory(ec) && !entry.is_symlink(ec);
    if (is_dir && Subfolder(folder, name)) {
      ClearedRun inner;
      PSF_ASSIGN_OR_RETURN(const bool emptied, Clear(entry.path(), *Subfolder(folder, name), shown + "/", &inner));
      cleared->kept.insert(cleared->kept.end(), inner.kept.begin(), inner.kept.end());
      if (emptied && fs::remove(entry.path(), ec)) {
        cleared->removed.push_back(shown + "/");
        continue;
      }
      cleared->removed.insert(cleared->removed.end(), inner.removed.begin(), inner.removed.end());
      everything = false;
      continue;
    }
    if (!is_dir && IsRunFile(folder, name)) {
      if (!fs::remove(entry.path(), ec) || ec) {
        return Status::IoError("--overwrite: cannot remove " + entry.path().string() + ": " + ec.message());
      }
      cleared->removed.push_back(shown);
      continue;
    }
    cleared->kept.push_back(shown + (is_dir ? "/" : ""));
    everything = false;
  }
  return everything;
}

}  // namespace

StatusOr<ClearedRun> RemoveRunFiles(const std::string& dir) {
  ClearedRun cleared;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return cleared;
  PSF_ASSIGN_OR_RETURN(const bool emptied, Clear(dir, Folder::kTop, "", &cleared));
  (void)emptied;  // the run directory itself stays: it holds the lock
  return cleared;
}

bool IsTopLevelRunFile(const std::string& name) { return IsRunFile(Folder::kTop, name); }

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace psformer
