// What a one-shot command (prepare, export, average, plot) leaves behind when Ctrl-C, SIGTERM
// or SIGHUP stops it midway: nothing of its own. Its partial results are written under
// temporary names (TemporaryDirectory, WriteFileAtomically) and renamed at the end; killed,
// it used to leave them beside the output (".data.tmp-PID/", "model.bin.tmp.PID"), gigabytes
// for a large corpus, until the next run to the same output swept them.
//
//   int RunPrepareCommand(...) {
//     RemoveTemporariesOnInterrupt("prepare");
//     ...
//
// Writers of temporary files register them (RegisterTemporary) and commit them by renaming
// (CommitTemporary); removal and commit are one mutex apart, so a stop never removes a result
// half-way through its rename. Registering costs nothing where no command installed the
// handling (the training roles, which stop in order on these signals instead).
#ifndef PSFORMER_COMMON_INTERRUPT_CLEANUP_H_
#define PSFORMER_COMMON_INTERRUPT_CLEANUP_H_

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

// Handles SIGINT, SIGTERM and SIGHUP from now on: a thread that waits for them removes every
// registered path, says "psformer COMMAND: interrupted; removed its unfinished files: PATH" (or
// "interrupted" alone) on stderr, and ends the process by the same signal, so that a shell
// running it (a script, a loop) sees it stopped by the signal and stops too. Call once.
void RemoveTemporariesOnInterrupt(const std::string& command);

// A file or directory (removed with all it holds) that the process writes and a stop removes.
// `created_parents`: the directories this process created to hold it (an output's missing
// parents, deepest first), removed after it by a stop or RemoveTemporary, each only if it is then
// empty (another writer's files keep it); a commit keeps them.
void RegisterTemporary(const std::filesystem::path& path, std::vector<std::filesystem::path> created_parents = {});

// Removes `path` (all it holds) and its empty created parents, and forgets it, unless a stop is
// removing it already.
void RemoveTemporary(const std::filesystem::path& path);

// Runs `commit` (the rename of registered `path` to its final name), and forgets `path` if it
// succeeded; never at the same time as a stop's removal.
Status CommitTemporary(const std::filesystem::path& path, const std::function<Status()>& commit);

// Starts a child process that works on the temporaries (gnuplot drawing into a scratch
// directory) with `spawn`, which returns 0 or an errno as posix_spawn does and sets `*pid`: a
// stop ends it (SIGKILL) and waits for it before it removes them, so that it neither writes
// there afterwards nor runs on unwatched. Never at the same time as a stop.
int SpawnChild(const std::function<int(pid_t* pid)>& spawn, pid_t* pid);

// Waits for a child of SpawnChild to end and reaps it (waitpid's status in `wait_status`),
// forgetting it before its PID is free for another process to take.
void WaitForChild(pid_t pid, int* wait_status);

}  // namespace psformer

#endif  // PSFORMER_COMMON_INTERRUPT_CLEANUP_H_
