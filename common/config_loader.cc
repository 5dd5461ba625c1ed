#include "common/config_loader.h"

#include <arpa/inet.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string_view>

#include "common/fault_plan.h"
#include "common/memory_estimate.h"
#include "common/read_file.h"

namespace psformer {
namespace {

namespace pb = google::protobuf;

// The names of `message`'s fields, in the order of its .proto ("layers, d_model, ...").
std::string FieldNames(const pb::Descriptor& message) {
  std::string names;
  for (int i = 0; i < message.field_count(); ++i) names += (i ? ", " : "") + message.field(i)->name();
  return names;
}

// Collects the first parse error with its 1-based line and column.
class FirstErrorCollector : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!has_error_) {
      has_error_ = true;
      line_ = line + 1;
      column_ = column + 1;
      message_ = message;
      // protobuf names the token it met; at the end of the text that is nothing, mostly
      // because a section's '{' was never closed.
      if (message_.size() >= 5 && message_.compare(message_.size() - 5, 5, "got: ") == 0) {
        message_ += "the end of the config (is a '{' not closed by its '}'?)";
      }
    }
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  bool has_error() const { return has_error_; }
  // `text`: what was parsed, to name the field of an error where protobuf does not.
  std::string Describe(const std::string& source, const std::string& text) const {
    std::string message = message_;
    if (message == "Expected integer, got: -") {
      // A negative number for a field that takes none (seed, the counts): protobuf names only
      // the minus sign.
      const std::string field = FieldBefore(text);
      message = "a negative number" + (field.empty() ? std::string() : " for " + field) +
                ", which takes a whole number >= 0 (" + message + ")";
    }
    // A misspelt field: protobuf names the section's type; the names it has say what was meant.
    static const std::regex kUnknownField("Message type \"([A-Za-z0-9_.]+)\" has no field named \"[^\"]*\"\\.");
    std::smatch m;
    if (std::regex_match(message, m, kUnknownField)) {
      if (const pb::Descriptor* type = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(m[1].str())) {
        message.pop_back();  // its full stop, after which the names go
        message += " (its fields: " + FieldNames(*type) + ")";
      }
    }
    return source + ":" + std::to_string(line_) + ":" + std::to_string(column_) + ": " + message;
  }

 private:
  // The name before the ':' that precedes the error's column on its line, or "".
  std::string FieldBefore(const std::string& text) const {
    size_t start = 0;
    for (int l = 1; l < line_ && start != std::string::npos; ++l) {
      start = text.find('\n', start);
      if (start != std::string::npos) ++start;
    }
    if (start == std::string::npos) return "";
    const std::string line = text.substr(start, text.find('\n', start) - start);
    size_t end = std::min<size_t>(line.size(), column_ > 0 ? column_ - 1 : 0);
    const size_t colon = line.rfind(':', end == 0 ? 0 : end - 1);
    if (colon == std::string::npos) return "";
    end = line.find_last_not_of(" \t", colon == 0 ? 0 : colon - 1);
    if (end == std::string::npos) return "";
    size_t begin = end + 1;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(line[begin - 1])) || line[begin - 1] == '_')) --begin;
    return line.substr(begin, end + 1 - begin);
  }

  bool has_error_ = false;
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

void FillMessageDefaults(pb::Message* message) {
  const pb::Descriptor* descriptor = message->GetDescriptor();
  const pb::Reflection* reflection = message->GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) {
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
          FillMessageDefaults(reflection->MutableRepeatedMessage(message, field, k));
        }
      }
      continue;
    }
    switch (field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        FillMessageDefaults(reflection->MutableMessage(message, field));
        break;
      case pb::FieldDescriptor::CPPTYPE_INT32:
        if (!reflection->HasField(*message, field)) reflection->SetInt32(message, field, field->default_value_int32());
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        if (!reflection->HasField(*message, field)) reflection->SetInt64(message, field, field->default_value_int64());
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        if (!reflection->HasField(*message, field))
          reflection->SetUInt32(message, field, field->default_value_uint32());
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        if (!reflection->HasField(*message, field))
          reflection->SetUInt64(message, field, field->default_value_uint64());
        break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT:
        if (!reflection->HasField(*message, field)) reflection->SetFloat(message, field, field->default_value_float());
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        if (!reflection->HasField(*message, field))
          reflection->SetDouble(message, field, field->default_value_double());
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        if (!reflection->HasField(*message, field)) reflection->SetBool(message, field, field->default_value_bool());
        break;
      case pb::FieldDescriptor::CPPTYPE_ENUM:
        if (!reflection->HasField(*message, field)) reflection->SetEnum(message, field, field->default_value_enum());
        break;
      case pb::FieldDescriptor::CPPTYPE_STRING:
        if (!reflection->HasField(*message, field))
          reflection->SetString(message, field, field->default_value_string());
        break;
    }
  }
}

// Collects validation failures; the first one is reported.
class Checker {
 public:
  void Require(bool ok, const std::string& field, const std::string& value, const std::string& reason) {
    if (!ok && status_.ok()) status_ = Status::InvalidArgument(field + " = " + value + ": " + reason);
  }
  // A failure already phrased (field, value, reason) by whoever found it.
  void Add(const Status& status) {
    if (!status.ok() && status_.ok()) status_ = status;
  }
  Status status() const { return status_; }

 private:
  Status status_;
};

template <typename T>
std::string Str(T v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Every float and double field of `message` and its sections, named "section.field": NaN and
// infinities pass many a range check (inf > 0) and then train nothing or diverge, so none is
// accepted anywhere, whatever the field means.
void RequireFinite(const pb::Message& message, const std::string& prefix, Checker* check) {
  const pb::Descriptor* descriptor = message.GetDescriptor();
  const pb::Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    const std::string path = prefix + field->name();
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int j = 0; j < count; ++j) {
      double value = 0;
      switch (field->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_MESSAGE:
          RequireFinite(field->is_repeated() ? reflection->GetRepeatedMessage(message, field, j)
                                             : reflection->GetMessage(message, field),
                        path + ".", check);
          continue;
        case pb::FieldDescriptor::CPPTYPE_DOUBLE:
          value = field->is_repeated() ? reflection->GetRepeatedDouble(message, field, j)
                                       : reflection->GetDouble(message, field);
          break;
        case pb::FieldDescriptor::CPPTYPE_FLOAT:
          value = field->is_repeated() ? reflection->GetRepeatedFloat(message, field, j)
                                       : reflection->GetFloat(message, field);
          break;
        default:
          continue;
      }
      check->Require(std::isfinite(value), path, Str(value), "must be a finite number");
    }
  }
}

}  // namespace

StatusOr<JobConfig> ParseConfigText(const std::string& text, const std::string& source_name) {
  JobConfig config;
  pb::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    if (errors.has_error()) return Status::InvalidArgument(errors.Describe(source_name, text));
    return Status::InvalidArgument(source_name + ": cannot parse config");
  }
  return config;
}

StatusOr<JobConfig> LoadConfigFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound("config file " + path + " does not exist");
  if (std::filesystem::is_directory(path, ec))
    return Status::InvalidArgument("config file " + path + " is a directory");
  PSF_ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path, "config file", kMaxTextFileBytes));
  // Some editors save UTF-8 with a byte-order mark, which the text format reads as a stray
  // character ("Interpreting non ascii codepoint 239"); it carries nothing here.
  constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
  if (text.rfind(kByteOrderMark, 0) == 0) text.erase(0, kByteOrderMark.size());
  return ParseConfigText(text, path);
}

StatusOr<JobConfig> LoadRunConfigFile(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(JobConfig config, LoadConfigFile(path));
  if (config.ByteSizeLong() == 0) {
    return Status::Corruption(path +
                              " sets nothing (it is empty or only comments): psformer train wrote the run's resolved "
                              "config there, and it was emptied or replaced since");
  }
  return config;
}

namespace {

// Parses `text` as one value of `field` into `message` (appended when repeated), without
// protobuf's own log line: the caller's message says it better.
bool ParseFieldValueQuietly(const std::string& text, const pb::FieldDescriptor* field, pb::Message* message) {
  pb::LogHandler* previous = pb::SetLogHandler(nullptr);
  const bool parsed = pb::TextFormat::ParseFieldValueFromString(text, field, message);
  pb::SetLogHandler(previous);
  return parsed;
}

}  // namespace

Status ApplyOverride(const std::string& assignment, JobConfig* config) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + assignment + ": expected field.path=value");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  pb::Message* message = config;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const pb::FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(name);
    if (field == nullptr) {
      return Status::InvalidArgument("--set " + assignment + ": " + message->GetDescriptor()->name() +
                                     " has no field '" + name +
                                     "' (its fields: " + FieldNames(*message->GetDescriptor()) + ")");
    }
    if (field->is_repeated() &&
        (dot != std::string::npos || field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE ||
         field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING)) {
      return Status::InvalidArgument("--set " + assignment + ": '" + name +
                                     "' is a repeated field; set it in the config file");
    }
    if (field->is_repeated()) {
      // A list of numbers: "2,2" (empty = none) replaces the field's values.
      message->GetReflection()->ClearField(message, field);
      std::stringstream items(value);
      std::string item;
      while (std::getline(items, item, ',')) {
        if (!ParseFieldValueQuietly(item, field, message)) {
          return Status::InvalidArgument("--set " + assignment + ": '" + item + "' is not a valid value for " + path +
                                         " (expected a comma-separated list of " + field->cpp_type_name() + ")");
        }
      }
      return Status::Ok();
    }
    if (dot == std::string::npos) {
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        return Status::InvalidArgument("--set " + assignment + ": '" + name + "' is a section, not a value");
      }
      // Strings are taken as typed; quotes are optional.
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING) {
        const bool quoted = value.size() >= 2 && value.front() == '"' && value.back() == '"';
        message->GetReflection()->SetString(message, field, quoted ? value.substr(1, value.size() - 2) : value);
        return Status::Ok();
      }
      if (!ParseFieldValueQuietly(value, field, message)) {
        std::string expected = field->cpp_type_name();
        if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) {
          expected = "one of";
          for (int i = 0; i < field->enum_type()->value_count(); ++i)
            expected += " " + field->enum_type()->value(i)->name();
        }
        return Status::InvalidArgument("--set " + assignment + ": '" + value + "' is not a valid value for " + path +
                                       " (expected " + expected + ")");
      }
      return Status::Ok();
    }
    if (field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      return Status::InvalidArgument("--set " + assignment + ": '" + name + "' is a value, not a section");
    }
    message = message->GetReflection()->MutableMessage(message, field);
    start = dot + 1;
  }
}

void FillDefaults(JobConfig* config) { FillMessageDefaults(config); }

bool WritesCheckpoints(const JobConfig& config) {
  return config.checkpoint().every_steps() > 0 || config.checkpoint().every_minutes() > 0;
}

int ResolvedVocabSize(const JobConfig& config) {
  if (config.model().vocab_size() > 0) return config.model().vocab_size();
  if (config.data().task() == proto::DataConfig::COPY) return config.data().copy_vocab_size();
  return 0;
}

namespace {

void CheckModel(const proto::ModelConfig& model, Checker* check) {
  check->Require(model.layers() > 0, "model.layers", Str(model.layers()), "must be positive");
  check->Require(model.d_model() > 0, "model.d_model", Str(model.d_model()), "must be positive");
  check->Require(model.d_ff() > 0, "model.d_ff", Str(model.d_ff()), "must be positive");
  check->Require(model.heads() > 0, "model.heads", Str(model.heads()), "must be positive");
  if (model.heads() > 0 && model.d_model() > 0) {
    check->Require(model.d_model() % model.heads() == 0, "model.heads", Str(model.heads()),
                   "d_model (" + Str(model.d_model()) + ") must be divisible by heads");
  }
  for (auto [value, field] :
       {std::pair{model.dropout(), "model.dropout"}, std::pair{model.attention_dropout(), "model.attention_dropout"},
        std::pair{model.relu_dropout(), "model.relu_dropout"},
        std::pair{model.label_smoothing(), "model.label_smoothing"}}) {
    check->Require(value >= 0 && value < 1, field, Str(value), "must be in [0, 1)");
  }
  check->Require(model.vocab_size() >= 0, "model.vocab_size", Str(model.vocab_size()),
                 "must be >= 0 (0 = from the data)");
  check->Require(model.vocab_size() == 0 || model.vocab_size() > 4, "model.vocab_size", Str(model.vocab_size()),
                 "must exceed the 4 reserved ids (pad, bos, eos, unk)");
  check->Require(model.max_positions() > 2, "model.max_positions", Str(model.max_positions()), "must be > 2");
}

void CheckOptimizer(const proto::OptimizerConfig& optimizer, const proto::ScheduleConfig& schedule, Checker* check) {
  check->Require(optimizer.beta1() >= 0 && optimizer.beta1() < 1, "optimizer.beta1", Str(optimizer.beta1()),
                 "must be in [0, 1)");
  check->Require(optimizer.beta2() >= 0 && optimizer.beta2() < 1, "optimizer.beta2", Str(optimizer.beta2()),
                 "must be in [0, 1)");
  check->Require(optimizer.epsilon() > 0, "optimizer.epsilon", Str(optimizer.epsilon()), "must be positive");
  check->Require(optimizer.warmup_steps() > 0, "optimizer.warmup_steps", Str(optimizer.warmup_steps()),
                 "must be positive (the schedule divides by it)");
  check->Require(optimizer.clip_norm() >= 0, "optimizer.clip_norm", Str(optimizer.clip_norm()),
                 "must be >= 0 (0 = off)");
  check->Require(schedule.scale() > 0, "schedule.scale", Str(schedule.scale()), "must be positive");
  check->Require(schedule.constant_lr() > 0, "schedule.constant_lr", Str(schedule.constant_lr()), "must be positive");
}

void CheckData(const proto::DataConfig& data, const proto::ModelConfig& model, Checker* check) {
  if (data.task() == proto::DataConfig::COPY) {
    check->Require(data.copy_vocab_size() > 4, "data.copy_vocab_size", Str(data.copy_vocab_size()),
                   "must exceed the 4 reserved ids (pad, bos, eos, unk)");
    check->Require(data.copy_min_length() >= 1, "data.copy_min_length", Str(data.copy_min_length()), "must be >= 1");
    check->Require(data.copy_max_length() >= data.copy_min_length(), "data.copy_max_length",
                   Str(data.copy_max_length()),
                   "must be >= data.copy_min_length (" + Str(data.copy_min_length()) + ")");
    check->Require(data.copy_max_length() + 2 <= model.max_positions(), "data.copy_max_length",
                   Str(data.copy_max_length()),
                   "plus bos/eos must fit model.max_positions (" + Str(model.max_positions()) + ")");
    check->Require(data.copy_train_size() > 0, "data.copy_train_size", Str(data.copy_train_size()), "must be positive");
    check->Require(data.copy_valid_size() > 0, "data.copy_valid_size", Str(data.copy_valid_size()), "must be positive");
    check->Require(model.vocab_size() == 0 || model.vocab_size() >= data.copy_vocab_size(), "model.vocab_size",
                   Str(model.vocab_size()),
                   "is smaller than data.copy_vocab_size (" + Str(data.copy_vocab_size()) + ")");
    // A corpus named for a task that reads none would train the copy task in its stead, unsaid.
    check->Require(data.train_dir().empty(), "data.train_dir", "\"" + data.train_dir() + "\"",
                   "is set, but data.task is COPY (the default), which reads no corpus: set data.task=CORPUS to "
                   "train on it, or drop data.train_dir");
  } else {
    check->Require(!data.train_dir().empty(), "data.train_dir", "\"\"",
                   "a CORPUS task needs the directory written by `psformer prepare`");
  }
  const std::string& sha = data.spm_sha256();
  check->Require(sha.empty() || (sha.size() == 64 && sha.find_first_not_of("0123456789abcdef") == std::string::npos),
                 "data.spm_sha256", "\"" + sha + "\"", "must be 64 lower-case hex digits (a SHA-256), or empty");
  check->Require(data.max_length() > 0, "data.max_length", Str(data.max_length()), "must be positive");
  check->Require(data.max_length_ratio() >= 1, "data.max_length_ratio", Str(data.max_length_ratio()), "must be >= 1");
}

void CheckBatching(const proto::BatchingConfig& batching, Checker* check) {
  check->Require(batching.src_tokens_per_step() > 0, "batching.src_tokens_per_step",
                 Str(batching.src_tokens_per_step()), "must be positive");
  check->Require(batching.tgt_tokens_per_step() > 0, "batching.tgt_tokens_per_step",
                 Str(batching.tgt_tokens_per_step()), "must be positive");
  check->Require(batching.bucket_width() > 0, "batching.bucket_width", Str(batching.bucket_width()),
                 "must be positive");
}

// cluster.host_groups: positive sizes adding up to the workers, under BSP with host summing on.
void CheckHostGroups(const proto::ClusterConfig& cluster, Checker* check) {
  if (cluster.host_groups_size() == 0) return;
  std::string groups;
  int64_t sum = 0;
  bool positive = true;
  for (int size : cluster.host_groups()) {
    groups += (groups.empty() ? "[" : ", ") + Str(size);
    sum += size;
    positive = positive && size > 0;
  }
  groups += "]";
  check->Require(positive, "cluster.host_groups", groups, "every group needs at least one worker");
  check->Require(cluster.workers() == 0 || sum == cluster.workers(), "cluster.host_groups", groups,
                 "adds up to " + Str(sum) + " workers, but cluster.workers = " + Str(cluster.workers()));
  check->Require(cluster.host_summing(), "cluster.host_groups", groups,
                 "is set while cluster.host_summing = false (leave it empty for the flat path)");
  check->Require(cluster.consistency() == proto::ClusterConfig::BSP, "cluster.host_groups", groups,
                 "host summing needs cluster.consistency = BSP (SSP and ASYNC apply each worker's push on its own)");
}

// The cluster's sizes, its timing and transport settings, and what its backend needs.
void CheckCluster(const JobConfig& config, Checker* check) {
  const proto::ClusterConfig& cluster = config.cluster();
  const proto::ModelConfig& model = config.model();
  check->Require(cluster.workers() >= 0, "cluster.workers", Str(cluster.workers()), "must be >= 0 (0 = one per GPU)");
  check->Require(cluster.servers() >= 1, "cluster.servers", Str(cluster.servers()), "must be >= 1");
  const int vocab = ResolvedVocabSize(config);
  if (model.d_model() > 0 && model.d_ff() > 0 && model.layers() > 0 && model.heads() > 0) {
    // Sizes computed with overflow checks before anything allocates or indexes by them; whether
    // they fit the machine is the launcher's question (it knows the machine).
    auto estimate = EstimateMemory(config, vocab);
    check->Add(estimate.status());
    if (estimate.ok() && vocab > 0) {
      check->Require(static_cast<uint64_t>(cluster.servers()) <= estimate->parameters, "cluster.servers",
                     Str(cluster.servers()), "more servers than parameters (" + Str(estimate->parameters) + ")");
    }
  }
  check->Require(cluster.staleness() >= 0, "cluster.staleness", Str(cluster.staleness()), "must be >= 0");
  check->Require(cluster.heartbeat_interval_ms() > 0, "cluster.heartbeat_interval_ms",
                 Str(cluster.heartbeat_interval_ms()), "must be positive");
  check->Require(cluster.heartbeat_timeout_ms() > cluster.heartbeat_interval_ms(), "cluster.heartbeat_timeout_ms",
                 Str(cluster.heartbeat_timeout_ms()),
                 "must exceed cluster.heartbeat_interval_ms (" + Str(cluster.heartbeat_interval_ms()) + ")");
  check->Require(cluster.max_restarts() >= 0, "cluster.max_restarts", Str(cluster.max_restarts()), "must be >= 0");
  check->Require(cluster.restart_backoff_ms() >= 0, "cluster.restart_backoff_ms", Str(cluster.restart_backoff_ms()),
                 "must be >= 0");
  check->Require(cluster.base_port() == 0 || (cluster.base_port() >= 1024 && cluster.base_port() <= 65000),
                 "cluster.base_port", Str(cluster.base_port()), "must be 0 (pick free ports) or in [1024, 65000]");
  check->Require(cluster.threads_per_process() >= 0, "cluster.threads_per_process", Str(cluster.threads_per_process()),
                 "must be >= 0");
  // Servers bind it as an IPv4 address (launcher/port_reservation.h): a name or a typo is refused
  // here, where the dry run sees it too, not once the run has started.
  in_addr address{};
  const std::string& bind_host = cluster.bind_host();
  check->Require(bind_host.empty() || bind_host == "*" || inet_pton(AF_INET, bind_host.c_str(), &address) == 1,
                 "cluster.bind_host", "\"" + bind_host.substr(0, 80) + "\"",
                 "not an IPv4 address (127.0.0.1 for one machine, this host's interface address, or 0.0.0.0 for all)");
  // AES_256_GCM seals with a key the job's CURVE keys bring; without them nothing would be sealed.
  check->Require(cluster.authenticate() || cluster.encryption() != proto::ClusterConfig::AES_256_GCM,
                 "cluster.encryption", "AES_256_GCM",
                 "needs cluster.authenticate = true (its key comes with the job's keys); with authenticate = false "
                 "every connection would be plain and unencrypted: set authenticate = true, or drop the encryption");
  check->Require(cluster.frame_bytes() >= 0, "cluster.frame_bytes", Str(cluster.frame_bytes()), "must be >= 0");
  check->Require(cluster.retry_ms() > 0, "cluster.retry_ms", Str(cluster.retry_ms()), "must be > 0");
  check->Require(cluster.shm_mib_per_process() >= 0, "cluster.shm_mib_per_process", Str(cluster.shm_mib_per_process()),
                 "must be >= 0 (0 = every payload inline)");
  check->Require(cluster.piece_elements() >= 0, "cluster.piece_elements", Str(cluster.piece_elements()),
                 "must be >= 0");
  check->Require(cluster.streams() >= 1 && cluster.streams() <= 64, "cluster.streams", Str(cluster.streams()),
                 "must be in [1, 64]");
  check->Require(cluster.send_window() >= 0 && cluster.send_window() <= 1024, "cluster.send_window",
                 Str(cluster.send_window()), "must be in [0, 1024] (0 = every message to ZeroMQ at once)");
  check->Require(cluster.send_buffer_kib() >= 0 && cluster.send_buffer_kib() <= 1048576, "cluster.send_buffer_kib",
                 Str(cluster.send_buffer_kib()), "must be in [0, 1048576] KiB (0 = the kernel's own sizing)");
  check->Require(cluster.slice_kib() >= 0 && cluster.slice_kib() <= 1048576, "cluster.slice_kib",
                 Str(cluster.slice_kib()), "must be in [0, 1048576] KiB (0 = whole messages)");
  check->Require(cluster.slice_kib() == 0 || cluster.send_window() > 0, "cluster.slice_kib", Str(cluster.slice_kib()),
                 "slices only messages held back: needs cluster.send_window > 0");
  if (cluster.sums_first()) {
    check->Require(cluster.send_window() > 0 && cluster.host_summing() && cluster.same_host_shm(), "cluster.sums_first",
                   "true",
                   "needs cluster.send_window > 0 (answers held back), cluster.host_summing = true (a host "
                   "aggregator's sums to wait for) and cluster.same_host_shm = true (the host's processes meet "
                   "beside the server's Unix socket)");
  }
  CheckHostGroups(cluster, check);
  if (cluster.split_embedding()) {
    // Only pieces (overlap under BSP) leave before backward ends: elsewhere the split buys nothing.
    check->Require(cluster.overlap() && cluster.consistency() == proto::ClusterConfig::BSP, "cluster.split_embedding",
                   "true",
                   "needs cluster.overlap = true and consistency BSP (only then does a piece leave before backward "
                   "ends)");
  }
  check->Require(cluster.output_projection_blocks() >= 1 && cluster.output_projection_blocks() <= 1024,
                 "cluster.output_projection_blocks", Str(cluster.output_projection_blocks()),
                 "must be in [1, 1024] (1 = the output projection's product whole)");
  check->Require(
      !(cluster.compute_dtype() == proto::ClusterConfig::BF16 && cluster.backend() == proto::ClusterConfig::CPU),
      "cluster.compute_dtype", "BF16", "bf16 compute needs the CUDA backend; the CPU backend is fp32");
  if (cluster.backend() == proto::ClusterConfig::EMULATED) {
    check->Require(cluster.emulated_step_ms() > 0, "cluster.emulated_step_ms", Str(cluster.emulated_step_ms()),
                   "must be positive");
    // Bounded so that a copy's time stays a sane duration (1e-30 GB/s would sleep for ages).
    check->Require(cluster.emulated_copy_gb_per_s() >= 0.01f && cluster.emulated_copy_gb_per_s() <= 100000.0f,
                   "cluster.emulated_copy_gb_per_s", Str(cluster.emulated_copy_gb_per_s()),
                   "must be in [0.01, 100000] (GB/s)");
    check->Require(cluster.emulated_lookup_rows() >= 0, "cluster.emulated_lookup_rows",
                   Str(cluster.emulated_lookup_rows()), "must be >= 0 (0 = a quarter of the vocabulary)");
    check->Require(vocab > 0, "model.vocab_size", Str(model.vocab_size()),
                   "emulated workers read no data: set the vocabulary size (cluster.backend = EMULATED)");
  }
}

void CheckTraining(const proto::TrainingConfig& training, Checker* check) {
  check->Require(training.max_steps() > 0, "training.max_steps", Str(training.max_steps()), "must be positive");
  check->Require(training.valid_every() >= 0, "training.valid_every", Str(training.valid_every()), "must be >= 0");
  check->Require(training.stop_at_valid_accuracy() >= 0 && training.stop_at_valid_accuracy() <= 1,
                 "training.stop_at_valid_accuracy", Str(training.stop_at_valid_accuracy()), "must be in [0, 1]");
  check->Require(training.valid_bleu_sentences() >= 0, "training.valid_bleu_sentences",
                 Str(training.valid_bleu_sentences()), "must be >= 0");
  check->Require(training.valid_bleu_beam() >= 1, "training.valid_bleu_beam", Str(training.valid_bleu_beam()),
                 "must be >= 1");
  check->Require(training.stop_at_valid_bleu() >= 0 && training.stop_at_valid_bleu() <= 100,
                 "training.stop_at_valid_bleu", Str(training.stop_at_valid_bleu()), "must be in [0, 100]");
  check->Require(training.stop_at_valid_bleu() == 0 || training.valid_bleu_sentences() > 0,
                 "training.stop_at_valid_bleu", Str(training.stop_at_valid_bleu()),
                 "needs training.valid_bleu_sentences > 0");
}

void CheckCheckpoints(const proto::CheckpointConfig& checkpoint, const proto::LoggingConfig& logging, Checker* check) {
  check->Require(checkpoint.every_steps() >= 0, "checkpoint.every_steps", Str(checkpoint.every_steps()),
                 "must be >= 0");
  check->Require(checkpoint.every_minutes() >= 0, "checkpoint.every_minutes", Str(checkpoint.every_minutes()),
                 "must be >= 0");
  check->Require(checkpoint.keep_last() >= 0, "checkpoint.keep_last", Str(checkpoint.keep_last()),
                 "must be >= 0 (0 = keep all)");
  check->Require(checkpoint.average_last() >= 1, "checkpoint.average_last", Str(checkpoint.average_last()),
                 "must be >= 1");
  check->Require(checkpoint.max_failures_in_a_row() >= 1, "checkpoint.max_failures_in_a_row",
                 Str(checkpoint.max_failures_in_a_row()), "must be >= 1");
  check->Require(checkpoint.keep_last() == 0 || checkpoint.keep_last() >= checkpoint.average_last(),
                 "checkpoint.keep_last", Str(checkpoint.keep_last()),
                 "must keep at least checkpoint.average_last (" + Str(checkpoint.average_last()) + ") checkpoints");
  check->Require(logging.every_steps() > 0, "logging.every_steps", Str(logging.every_steps()), "must be positive");
}

// The fault section: each event aimed at a role and step that exist, transport fault fractions
// that a message can meet (at most one each), and the restart environment.
void CheckFaults(const JobConfig& config, Checker* check) {
  const proto::FaultConfig& fault = config.fault();
  const proto::ClusterConfig& cluster = config.cluster();
  auto events = FaultEvents(fault);
  check->Add(events.status());
  for (size_t i = 0; events.ok() && i < events->size(); ++i) {
    const auto& e = (*events)[i];
    const std::string name = static_cast<int>(i) < fault.events_size() ? "fault.events[" + Str(i) + "]"
                                                                       : "fault.kill (" + fault.kill() + ")";
    const auto role = e.role();
    const char* what = role == proto::FaultConfig::Event::WORKER   ? "worker"
                       : role == proto::FaultConfig::Event::SERVER ? "server"
                                                                   : "host group (cluster.host_groups)";
    const int count = role == proto::FaultConfig::Event::WORKER   ? cluster.workers()
                      : role == proto::FaultConfig::Event::SERVER ? cluster.servers()
                                                                  : cluster.host_groups_size();
    // Groups derived from the placement are not known here; the launcher names them.
    const bool unknown = count == 0 && role != proto::FaultConfig::Event::SERVER;
    check->Require(e.index() >= 0 && (unknown || e.index() < count), name + ".index", Str(e.index()),
                   std::string("no such ") + what);
    check->Require(e.at_step() >= 1 && e.at_step() <= config.training().max_steps(), name + ".at_step",
                   Str(e.at_step()), "must be in [1, training.max_steps]");
    check->Require(e.stall_ms() >= 0, name + ".stall_ms", Str(e.stall_ms()), "must be >= 0");
    check->Require(e.action() != proto::FaultConfig::Event::KILL_IN_SHM || cluster.same_host_shm(), name + ".action",
                   "KILL_IN_SHM", "strikes in a copy through shared memory: needs cluster.same_host_shm = true");
  }
  for (auto [value, field] : {std::pair{fault.drop_fraction(), "fault.drop_fraction"},
                              std::pair{fault.duplicate_fraction(), "fault.duplicate_fraction"},
                              std::pair{fault.delay_fraction(), "fault.delay_fraction"},
                              std::pair{fault.reorder_fraction(), "fault.reorder_fraction"}}) {
    check->Require(value >= 0 && value < 1, field, Str(value), "must be in [0, 1)");
  }
  // A message meets at most one transport fault (common/transport/faulty_van.h).
  const float fractions =
      fault.drop_fraction() + fault.duplicate_fraction() + fault.delay_fraction() + fault.reorder_fraction();
  check->Require(fractions <= 1.0f + 1e-6f,
                 "fault.drop_fraction + duplicate_fraction + delay_fraction + reorder_fraction", Str(fractions),
                 "must be <= 1: a message meets at most one fault");
  check->Require(fault.delay_ms() >= 0, "fault.delay_ms", Str(fault.delay_ms()), "must be >= 0");
  check->Add(RestartEnvironment(fault).status());
}

}  // namespace

Status ValidateConfig(const JobConfig& config) {
  // Section by section; the first failure is the one reported.
  Checker check;
  RequireFinite(config, "", &check);
  CheckModel(config.model(), &check);
  CheckOptimizer(config.optimizer(), config.schedule(), &check);
  CheckData(config.data(), config.model(), &check);
  CheckBatching(config.batching(), &check);
  CheckCluster(config, &check);
  CheckTraining(config.training(), &check);
  CheckCheckpoints(config.checkpoint(), config.logging(), &check);
  CheckFaults(config, &check);
  return check.status();
}

Status ValidateModelConfig(const proto::ModelConfig& model) {
  Checker check;
  CheckModel(model, &check);
  return check.status();
}

Status CheckConfigFiles(const JobConfig& config) {
  const auto& d = config.data();
  std::error_code ec;
  // Emulated workers read no data (worker/emulated_gpu.h).
  const bool emulated = config.cluster().backend() == proto::ClusterConfig::EMULATED;
  if (d.task() != proto::DataConfig::CORPUS || emulated) return Status::Ok();
  if (!std::filesystem::is_directory(d.train_dir(), ec)) {
    if (std::filesystem::exists(d.train_dir(), ec)) {
      return Status::InvalidArgument(
          "data.train_dir = \"" + d.train_dir() +
          "\" is a file, not a directory: name the directory `psformer prepare --out` wrote");
    }
    return Status::NotFound("data.train_dir = \"" + d.train_dir() +
                            "\": directory does not exist (run `psformer prepare` first)");
  }
  // What every worker opens first: without them the job would start and its workers fail.
  for (const char* file : {"spm.model", "train.bin"}) {
    const std::filesystem::path path = std::filesystem::path(d.train_dir()) / file;
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
      return Status::InvalidArgument(path.string() + " is " +
                                     (std::filesystem::is_directory(path, ec) ? "a directory" : "not a regular file") +
                                     ", not the file `psformer prepare` writes there");
    }
    if (!std::filesystem::is_regular_file(path, ec)) {
      return Status::NotFound("data.train_dir = \"" + d.train_dir() + "\" has no " + file +
                              ": not a directory `psformer prepare` wrote (run it with --out there first)");
    }
  }
  return Status::Ok();
}

Status CheckOverrides(const std::vector<std::string>& overrides) {
  JobConfig config;
  FillDefaults(&config);
  for (const std::string& assignment : overrides) PSF_RETURN_IF_ERROR(ApplyOverride(assignment, &config));
  return Status::Ok();
}

StatusOr<JobConfig> ResolveConfig(const std::string& path, const std::vector<std::string>& overrides) {
  PSF_ASSIGN_OR_RETURN(JobConfig config, LoadConfigFile(path));
  if (config.ByteSizeLong() == 0 && overrides.empty()) {
    // Most likely a wrong or truncated file; the paper's base model on the copy task is never
    // what was meant. A config made of --set alone says what it wants.
    return Status::InvalidArgument("config file " + path +
                                   " sets nothing (it is empty or only comments); name at least the model and the "
                                   "data in it, or give every field you mean with --set");
  }
  FillDefaults(&config);
  for (const std::string& assignment : overrides) PSF_RETURN_IF_ERROR(ApplyOverride(assignment, &config));
  const Status valid = ValidateConfig(config);
  if (valid.ok()) return config;
  // A value the file does not hold is not the file's to be blamed for: the --set that gave a
  // field the message names is said with it.
  std::string with;
  for (const std::string& assignment : overrides) {
    const std::string field = assignment.substr(0, assignment.find('='));
    if (!field.empty() && valid.message().find(field) != std::string::npos) with += " --set " + assignment;
  }
  return valid.WithContext("invalid config " + path + (with.empty() ? "" : " with" + with));
}

std::string ConfigToText(const JobConfig& config) {
  std::string text;
  pb::TextFormat::Printer printer;
  printer.PrintToString(config, &text);
  return text;
}

}  // namespace psformer
