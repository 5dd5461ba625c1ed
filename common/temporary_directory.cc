#include "common/temporary_directory.h"

#include <unistd.h>

#include <string>

namespace psformer {
namespace fs = std::filesystem;

StatusOr<TemporaryDirectory> TemporaryDirectory::CreateBeside(const fs::path& target) {
  const fs::path out = fs::absolute(target).lexically_normal();
  // "DIR/" names DIR too.
  const fs::path final_dir = out.has_filename() ? out : out.parent_path();
  const fs::path parent = final_dir.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Status::IoError("cannot create " + parent.string() + ": " + ec.message());
  // Hidden, and distinct for concurrent runs. Built by appending, since GCC 12 warns wrongly
  // (-Wrestrict) about `"." + std::string`.
  std::string name = final_dir.filename().string();
  name.insert(0, 1, '.').append(".tmp-").append(std::to_string(::getpid()));
  TemporaryDirectory temp(parent / name);
  fs::remove_all(temp.path(), ec);
  if (!fs::create_directory(temp.path(), ec) || ec) {
    return Status::IoError("cannot create " + temp.path().string() + ": " + ec.message());
  }
  return temp;
}

TemporaryDirectory::TemporaryDirectory(TemporaryDirectory&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ec;
  if (!path_.empty()) fs::remove_all(path_, ec);
}

Status TemporaryDirectory::RenameTo(const fs::path& target) {
  std::error_code ec;
  fs::rename(path_, target, ec);
  if (ec) return Status::IoError("cannot rename " + path_.string() + " to " + target.string() + ": " + ec.message());
  path_.clear();
  return Status::Ok();
}

}  // namespace psformer
