// Loads, overrides, completes and validates job configs (protobuf text format).
//
//   auto config = ResolveConfig("configs/base.pbtxt", {"model.heads=16"});
//   if (!config.ok()) { print config.status().message(); exit non-zero }
//
// Every failure names what is wrong and where: the file, line and column of a syntax
// error; the field path and the reason for a value that cannot work.
#ifndef PSFORMER_COMMON_CONFIG_LOADER_H_
#define PSFORMER_COMMON_CONFIG_LOADER_H_

#include <string>
#include <vector>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

using proto::JobConfig;

// Parses a text-format config file. Unknown fields and syntax errors are rejected with
// "FILE:LINE:COLUMN: reason". Does not fill defaults or validate.
StatusOr<JobConfig> LoadConfigFile(const std::string& path);

// A run's own config.pbtxt, which psformer train writes resolved and never empty: as
// LoadConfigFile, but a file that sets nothing (emptied, or only comments) is refused as damaged
// instead of read as every default (the paper's base model on the copy task).
StatusOr<JobConfig> LoadRunConfigFile(const std::string& path);

// Parses text-format config from a string; `source_name` stands for the file in messages.
StatusOr<JobConfig> ParseConfigText(const std::string& text, const std::string& source_name);

// Applies one "field.path=value" override (scalar and enum fields; the value in text format,
// e.g. "model.norm_position=PRE_LN", "data.train_dir=/data/bible").
Status ApplyOverride(const std::string& assignment, JobConfig* config);

// Whether every override would apply (ApplyOverride on a default config): a --set whose syntax,
// field or value is wrong is a mistake of the command line, told before any file is read.
Status CheckOverrides(const std::vector<std::string>& overrides);

// Sets every unset field that has a default to that default, in every section, so that the
// printed config shows all values the job runs with.
void FillDefaults(JobConfig* config);

// Rejects configs that cannot work. REQUIRES: FillDefaults was applied.
Status ValidateConfig(const JobConfig& config);
// The model section's checks of ValidateConfig alone: for a model config read back from a file
// (a model.bin or a checkpoint), which may not be what this build would have written.
Status ValidateModelConfig(const proto::ModelConfig& model);

// Checks that the files and directories the config names exist. Separate from
// ValidateConfig so that a config can be checked (--dry-run) before its data is prepared.
Status CheckConfigFiles(const JobConfig& config);

// LoadConfigFile + FillDefaults + each override in order + ValidateConfig. A file that sets
// nothing is refused unless overrides are given (a config of --set alone).
StatusOr<JobConfig> ResolveConfig(const std::string& path, const std::vector<std::string>& overrides);

// Text format, every field printed, as saved to RUN_DIR/config.pbtxt.
std::string ConfigToText(const JobConfig& config);

// The vocabulary size the model is built with: model.vocab_size when set, else the copy
// task's vocabulary, else 0 (to be read from the SentencePiece model of the corpus).
int ResolvedVocabSize(const JobConfig& config);

// Whether the job writes checkpoints as it trains (checkpoint.every_steps or every_minutes set;
// a validated config has neither negative), and so its last step's too.
bool WritesCheckpoints(const JobConfig& config);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CONFIG_LOADER_H_
