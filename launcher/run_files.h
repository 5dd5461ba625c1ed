// The files psformer writes in a run directory, told apart from anything else a user keeps
// there, so that `train --overwrite` removes exactly psformer's and leaves (and names) the rest.
//
// psformer's, by folder (a name may end in .tmp, .tmp.PID or .tmp-PID, a write that did not finish):
//   RUN_DIR/                 config.pbtxt model.bin metrics.jsonl trainer_state.bin plot.png
//   checkpoints/step-N/      manifest.pbtxt shard-*.bin
//   checkpoints/epochs/      N (recovery epochs)
//   logs/                    pserver-N.log worker-N.log aggregator-N.log supervisor.log
//                            supervisor-N.log trainer.log (--local) launch.log
//   tensorboard/[server-N/]  events.out.tfevents.*
//   valid_bleu/              step-N.hyp reference.txt
//   ipc/                     pserver-N.sock
// RUN_DIR/.lock is psformer's too but never removed: the job that overwrites holds it.
#ifndef PSFORMER_LAUNCHER_RUN_FILES_H_
#define PSFORMER_LAUNCHER_RUN_FILES_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

struct ClearedRun {
  // What went, relative to the run directory: a folder emptied entirely as "name/", else each
  // file on its own.
  std::vector<std::string> removed;
  // What stayed because psformer does not write it ("logs/notes.txt", "my-data/").
  std::vector<std::string> kept;
};

// Removes psformer's files from `dir` (folders of psformer's only when nothing else is left in
// them). Fails on the first file that cannot be removed, naming it; what was removed by then
// is gone.
StatusOr<ClearedRun> RemoveRunFiles(const std::string& dir);

// Whether `name` is a file psformer writes at the top of a run directory (config.pbtxt,
// model.bin, metrics.jsonl, trainer_state.bin, plot.png), finished or not.
bool IsTopLevelRunFile(const std::string& name);

// "a, b, c": names for a message.
std::string JoinNames(const std::vector<std::string>& names);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_RUN_FILES_H_
