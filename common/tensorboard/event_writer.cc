#include "common/tensorboard/event_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/logging.h"
#include "common/proto/tensorboard_event.pb.h"
#include "common/tensorboard/record_file.h"

namespace psformer::tensorboard {
namespace {

namespace fs = std::filesystem;

double WallTime() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

// Each scalar tag's last step over the event files of `dir`.
std::map<std::string, int64_t> LastSteps(const fs::path& dir) {
  std::map<std::string, int64_t> last;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().find("tfevents") == std::string::npos) continue;
    auto records = ReadRecords(entry.path().string());
    if (!records.ok()) {
      PSF_LOG(Warning) << "tensorboard: skipping " << entry.path().string() << ": " << records.status().message();
      continue;
    }
    for (const std::string& record : records.value()) {
      Event event;
      if (!event.ParseFromString(record) || !event.has_summary()) continue;
      for (const Summary::Value& v : event.summary().value()) {
        if (!v.has_simple_value()) continue;
        auto [it, inserted] = last.emplace(v.tag(), event.step());
        if (!inserted) it->second = std::max(it->second, event.step());
      }
    }
  }
  return last;
}

}  // namespace

StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  std::map<std::string, int64_t> last_steps = LastSteps(dir);
  const std::string stem = "events.out.tfevents." + std::to_string(static_cast<int64_t>(WallTime())) + "." +
                           HostName() + "." + std::to_string(getpid());
  std::string path = (fs::path(dir) / stem).string();
  for (int i = 1; fs::exists(path); ++i) path = (fs::path(dir) / (stem + "." + std::to_string(i))).string();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
  std::unique_ptr<EventWriter> writer(new EventWriter(file, path, std::move(last_steps)));
  Event first;
  first.set_wall_time(WallTime());
  first.set_file_version("brain.Event:2");
  PSF_RETURN_IF_ERROR(writer->WriteEvent(first.SerializeAsString()));
  return writer;
}

EventWriter::~EventWriter() { std::fclose(file_); }

Status EventWriter::WriteEvent(const std::string& serialized) {
  const std::string record = FrameRecord(serialized);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return Status::IoError("cannot write to " + path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status EventWriter::AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    auto it = last_steps_.find(tag);
    if (it != last_steps_.end() && it->second >= step) continue;
    last_steps_[tag] = step;
    Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  if (!event.has_summary()) return Status::Ok();
  return WriteEvent(event.SerializeAsString());
}

Status EventWriter::AddText(const std::string& tag, int64_t step, const std::string& text) {
  Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  Tensor* tensor = v->mutable_tensor();
  tensor->set_dtype(Tensor::DT_STRING);
  tensor->mutable_tensor_shape();
  tensor->add_string_val(text);
  return WriteEvent(event.SerializeAsString());
}

int64_t EventWriter::LastStep(const std::string& tag) const {
  auto it = last_steps_.find(tag);
  return it == last_steps_.end() ? -1 : it->second;
}

}  // namespace psformer::tensorboard
