// The one way psformer writes a result file (a model, a config, a plot, trainer state): the
// whole file or a failure that says why, never a success that did not happen.
//
// A regular file (or a missing one) is replaced atomically: the bytes go to PATH.tmp.PID beside
// it, every write, the fsync and the close are checked, then it is renamed over PATH and the
// directory is synced; on failure PATH is as it was and the temporary file is gone. A symbolic
// link is followed: its target is replaced, the link stays.
//
// What is not a regular file is never replaced: a character device or a pipe (/dev/stdout,
// /dev/null, a FIFO) is written in place, each write checked, so /dev/full fails with "No space
// left on device" and stays the device it was; a directory, block device or socket is refused.
#ifndef PSFORMER_COMMON_WRITE_FILE_H_
#define PSFORMER_COMMON_WRITE_FILE_H_

#include <string>
#include <string_view>

#include "common/status.h"

namespace psformer {

// Writes `bytes` to `path` as above. Errors name `path` and the cause (strerror).
Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// Removes the temporary files beside `path` ("PATH.tmp.PID", regular files) of writers that no
// longer run on this machine: a command killed (kill -9, the OOM killer) before it could rename
// or remove its own, which a stop by a signal does (common/interrupt_cleanup.h). For results one
// command on one machine writes (psformer average's --output, plot's --out), never for files that
// ranks on several hosts write, whose PIDs this machine does not know. Through a symbolic link,
// beside its target, where the write puts them.
void RemoveDeadWritersTemporaryFiles(const std::string& path);

// Whether a command may replace `path` with a new `kind` (e.g. "psformer model file") whose bytes
// begin with `magic`: yes where nothing is there, where it is not a regular file (a device,
// written in place; a directory, which the write refuses), or where it begins with `magic` (an
// earlier result of the same kind). Otherwise (a user's file of another kind) an error that
// names `option` and the path.
Status CheckReplaceable(const std::string& option, const std::string& path, std::string_view magic,
                        const std::string& kind);

// Makes directory `dir` and those above it that are missing. A failure says "cannot create
// `what` DIR: " and why; where a file stands in the way ("--out notes.txt/model"), it names that
// file ("notes.txt is a file, not a directory") rather than the system's "Not a directory".
Status MakeDirectories(const std::string& dir, const std::string& what);

// Makes directory `dir` and those missing between it and `run_dir`, but never `run_dir` itself:
// a role of a job whose run directory was removed or renamed while it ran must not make a new
// one of that name (where another job may be starting) by writing a checkpoint into it, nor
// write into another directory made under that name (common/run_directory_identity.h). Fails
// naming `run_dir` then. REQUIRES: `dir` lies below `run_dir`.
Status MakeDirectoriesInRun(const std::string& run_dir, const std::string& dir);

}  // namespace psformer

#endif  // PSFORMER_COMMON_WRITE_FILE_H_
