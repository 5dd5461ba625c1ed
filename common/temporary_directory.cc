#include "common/temporary_directory.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/interrupt_cleanup.h"
#include "common/process_exists.h"
#include "common/write_file.h"

namespace psformer {
namespace fs = std::filesystem;

namespace {

// Removes the temporary directories beside `parent / name` ("." + name + ".tmp-PID") of writers
// that are no longer running on this machine: one killed (Ctrl-C, kill -9, the machine's OOM
// killer) before it renamed or removed its own. One of a live process, this one's included, is
// left alone.
void RemoveDeadWritersTemporaries(const fs::path& parent, const std::string& name) {
  std::string prefix = name;
  prefix.insert(0, 1, '.').append(".tmp-");
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = entry.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || ProcessExists(pid) || pid <= 0) continue;
    std::error_code ignored;
    if (it->is_directory(ignored) && !it->is_symlink(ignored)) fs::remove_all(it->path(), ignored);
  }
}

}  // namespace

StatusOr<TemporaryDirectory> TemporaryDirectory::CreateBeside(const fs::path& target) {
  const fs::path out = fs::absolute(target).lexically_normal();
  // "DIR/" names DIR too.
  const fs::path final_dir = out.has_filename() ? out : out.parent_path();
  const fs::path parent = final_dir.parent_path();
  std::error_code ec;
  // The parents this creates go with the temporary directory if it is removed: a failed or
  // stopped writer of "a/b/out" leaves no empty "a/b" behind.
  std::vector<fs::path> created;
  for (fs::path up = parent; !up.empty() && up != up.root_path() && !fs::exists(up, ec); up = up.parent_path()) {
    created.push_back(up);
  }
  PSF_RETURN_IF_ERROR(MakeDirectories(parent.string(), ""));
  // Hidden, and distinct for concurrent runs. Built by appending, since GCC 12 warns wrongly
  // (-Wrestrict) about `"." + std::string`.
  RemoveDeadWritersTemporaries(parent, final_dir.filename().string());
  std::string name = final_dir.filename().string();
  name.insert(0, 1, '.').append(".tmp-").append(std::to_string(::getpid()));
  TemporaryDirectory temp(parent / name);
  fs::remove_all(temp.path(), ec);
  if (!fs::create_directory(temp.path(), ec) || ec) {
    const Status failed = Status::IoError("cannot create " + temp.path().string() + ": " + ec.message());
    for (const fs::path& dir : created) {
      if (!fs::remove(dir, ec)) break;
    }
    return failed;
  }
  RegisterTemporary(temp.path(), std::move(created));
  return temp;
}

TemporaryDirectory::TemporaryDirectory(TemporaryDirectory&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

TemporaryDirectory::~TemporaryDirectory() {
  if (!path_.empty()) RemoveTemporary(path_);
}

Status TemporaryDirectory::RenameTo(const fs::path& target) {
  PSF_RETURN_IF_ERROR(CommitTemporary(path_, [&] {
    std::error_code ec;
    fs::rename(path_, target, ec);
    if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists) {
      // Checked empty or absent when the command began: another writer got there first (two
      // commands with the same output at once), and what it wrote is left as it is.
      return Status::IoError(target.string() +
                             " was written by another process meanwhile; it is left as that "
                             "process wrote it, and this result is dropped");
    }
    if (ec) return Status::IoError("cannot rename " + path_.string() + " to " + target.string() + ": " + ec.message());
    return Status::Ok();
  }));
  path_.clear();
  return Status::Ok();
}

}  // namespace psformer
