// The SentencePiece model a model file was trained with, found from its run directory: what
// `psformer translate` and `psformer export` use when --spm is not given. A model in a run
// directory (RUN_DIR/model.bin, or `psformer average` output written there) lies beside the
// run's config.pbtxt, whose corpus holds it: data.train_dir/spm.model (a relative train_dir is
// taken from the current directory, as the job that wrote it did). Whether it is the right one
// is still decided by the digest the model records (CheckSentencePiece, common/model_file.h).
#ifndef PSFORMER_LAUNCHER_RUN_SENTENCEPIECE_H_
#define PSFORMER_LAUNCHER_RUN_SENTENCEPIECE_H_

#include <boost/program_options.hpp>
#include <string>

#include "common/status.h"

namespace psformer {

// The path of that spm.model, or why there is none to take (InvalidArgument, ending with what
// to give instead).
StatusOr<std::string> RunSentencePiece(const std::string& model_path);

// --spm when given, else RunSentencePiece(model_path), which `command` then names on stderr.
StatusOr<std::string> SentencePieceOption(const std::string& command,
                                          const boost::program_options::variables_map& values,
                                          const std::string& model_path);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_RUN_SENTENCEPIECE_H_
