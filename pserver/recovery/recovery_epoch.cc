#include "pserver/recovery/recovery_epoch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/logging.h"
#include "common/write_file.h"

namespace psformer {

Refusal RecoveryEpoch::Check(const proto::Header& h) const {
  const proto::MessageType t = h.type();
  if (t != proto::PUSH && t != proto::PULL && t != proto::CHECKPOINT && t != proto::ROLLBACK) return std::nullopt;
  if (t == proto::ROLLBACK ? h.epoch() >= epoch_ : h.epoch() == epoch_) return std::nullopt;
  return Rejection{RejectReason::kOtherEpoch, proto::MessageType_Name(t) + " of recovery epoch " +
                                                  std::to_string(h.epoch()) + "; this shard is in epoch " +
                                                  std::to_string(epoch_) + ", which began at step " +
                                                  std::to_string(start_step_)};
}

uint64_t TakeRecoveryEpoch(const std::string& run_dir, int shard, uint32_t incarnation) {
  const uint64_t unique_to_this_server = static_cast<uint64_t>(incarnation) * 1024 + static_cast<uint64_t>(shard) + 1;
  if (run_dir.empty()) return unique_to_this_server;
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "checkpoints" / "epochs";
  // Not the run directory itself, should it be gone (write_file.h): the open below fails then.
  (void)MakeDirectoriesInRun(run_dir, dir.string());
  for (uint64_t e = 1;; ++e) {
    const std::string path = (dir / std::to_string(e)).string();
    const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd >= 0) {
      close(fd);
      return e;
    }
    if (errno != EEXIST) {
      PSF_LOG(Error) << "cannot record recovery epoch in " << path << ": " << strerror(errno);
      return unique_to_this_server;
    }
  }
}

}  // namespace psformer
