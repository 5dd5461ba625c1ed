#include "launcher/supervisor_log.h"

#include <charconv>

namespace psformer {
namespace {

size_t DigitsAt(std::string_view text, size_t at) {
  size_t n = 0;
  while (at + n < text.size() && text[at + n] >= '0' && text[at + n] <= '9') ++n;
  return n;
}

template <typename T>
bool ToNumber(std::string_view digits, T* value) {
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), *value);
  return error == std::errc() && end == digits.data() + digits.size();
}

// At `at`: "worker-N" or "pserver-N", an optional ':' and a space; the role's name and where its
// message begins.
std::optional<std::pair<std::string_view, size_t>> RoleAt(std::string_view line, size_t at) {
  for (std::string_view kind : {std::string_view("worker-"), std::string_view("pserver-")}) {
    if (line.substr(at, kind.size()) != kind) continue;
    const size_t digits = DigitsAt(line, at + kind.size());
    if (digits == 0) return std::nullopt;
    size_t end = at + kind.size() + digits;
    const std::string_view name = line.substr(at, end - at);
    if (end < line.size() && line[end] == ':') ++end;
    if (end < line.size() && line[end] == ' ') return std::make_pair(name, end + 1);
    return std::nullopt;
  }
  return std::nullopt;
}

// "started pid P (incarnation I)" anywhere in `message`.
bool FindStarted(std::string_view message, RoleLogEvent* event) {
  static constexpr std::string_view kStarted = "started pid ", kIncarnation = " (incarnation ";
  for (size_t at = message.find(kStarted); at != std::string_view::npos; at = message.find(kStarted, at + 1)) {
    const size_t pid_at = at + kStarted.size();
    const size_t pid_digits = DigitsAt(message, pid_at);
    if (pid_digits == 0 || message.substr(pid_at + pid_digits, kIncarnation.size()) != kIncarnation) continue;
    const size_t inc_at = pid_at + pid_digits + kIncarnation.size();
    const size_t inc_digits = DigitsAt(message, inc_at);
    if (inc_digits == 0 || inc_at + inc_digits >= message.size() || message[inc_at + inc_digits] != ')') continue;
    if (!ToNumber(message.substr(pid_at, pid_digits), &event->pid) ||
        !ToNumber(message.substr(inc_at, inc_digits), &event->incarnation)) {
      return false;
    }
    return true;
  }
  return false;
}

// "HOW; restarting in N ms as incarnation I" ending `message`: HOW.
std::optional<std::string_view> RestartingAfter(std::string_view message) {
  static constexpr std::string_view kRestarting = "; restarting in ", kAs = " ms as incarnation ";
  // The suffix holds no second "; restarting in ", so only the last one can begin it.
  const size_t at = message.rfind(kRestarting);
  if (at == std::string_view::npos) return std::nullopt;
  size_t pos = at + kRestarting.size();
  const size_t ms_digits = DigitsAt(message, pos);
  if (ms_digits == 0 || message.substr(pos + ms_digits, kAs.size()) != kAs) return std::nullopt;
  pos += ms_digits + kAs.size();
  const size_t digits = DigitsAt(message, pos);
  if (digits == 0 || pos + digits != message.size()) return std::nullopt;
  return message.substr(0, at);
}

}  // namespace

std::optional<RoleLogEvent> ParseSupervisorLogLine(std::string_view line) {
  std::optional<std::pair<std::string_view, size_t>> role;
  for (size_t at = line.find("] "); at != std::string_view::npos && !role; at = line.find("] ", at + 1)) {
    role = RoleAt(line, at + 2);
  }
  if (!role) return std::nullopt;
  RoleLogEvent event;
  event.role = std::string(role->first);
  const std::string_view message = line.substr(role->second);
  if (FindStarted(message, &event)) {
    event.kind = RoleLogEvent::Kind::kStarted;
  } else if (message == "finished") {
    event.kind = RoleLogEvent::Kind::kFinished;
  } else if (const auto how = RestartingAfter(message)) {
    event.kind = RoleLogEvent::Kind::kRestarting;
    event.detail = std::string(*how);
  } else if (message.find("cluster.max_restarts") != std::string_view::npos ||
             message.find("while stopping") != std::string_view::npos) {
    event.kind = RoleLogEvent::Kind::kFailed;
    event.detail = std::string(message);
  }
  return event;
}

}  // namespace psformer
