// A directory written in full before anyone sees it: its files go into a hidden temporary
// directory beside the target (".NAME.tmp-PID", on the same file system), which is renamed to
// the target at the end or removed if the writer gives up. `psformer prepare` and
// `psformer export` write their output directories this way, so a failure leaves nothing partial.
#ifndef PSFORMER_COMMON_TEMPORARY_DIRECTORY_H_
#define PSFORMER_COMMON_TEMPORARY_DIRECTORY_H_

#include <filesystem>

#include "common/status.h"

namespace psformer {

class TemporaryDirectory {
 public:
  // Creates the parent of `target` if needed (removed again with the temporary directory, where
  // left empty, if the rename never comes), then an empty temporary directory beside `target`
  // (an old one of this process's name is removed first, and so are those of `target`'s earlier
  // writers that were killed before they could remove theirs: PIDs not running on this machine).
  // Fails naming the directory that could not be made and why.
  static StatusOr<TemporaryDirectory> CreateBeside(const std::filesystem::path& target);

  TemporaryDirectory(TemporaryDirectory&& other) noexcept;
  TemporaryDirectory& operator=(TemporaryDirectory&&) = delete;
  // Removes the directory and everything in it, unless RenameTo succeeded.
  ~TemporaryDirectory();

  const std::filesystem::path& path() const { return path_; }
  // Renames the directory to `target`; afterwards the destructor leaves it alone. An empty
  // directory at `target` is replaced; a non-empty one makes the rename fail.
  Status RenameTo(const std::filesystem::path& target);

 private:
  explicit TemporaryDirectory(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;  // empty once renamed or moved from
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TEMPORARY_DIRECTORY_H_
