#include "launcher/hostfile.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/read_file.h"

namespace psformer {

namespace {

// Why `host` cannot be a hostfile's host name ("" when it can): mpirun takes it in a comma-separated
// --host list with ":N" for the slots, and the launch probes it by name, so only a plain name or
// IPv4 address will do.
std::string HostNameProblem(const std::string& host) {
  if (host.find(':') != std::string::npos || host.find('[') != std::string::npos) {
    return "IPv6 addresses (and \"host:N\") are not taken: give the host's name or IPv4 address, and its "
           "slots as slots=N";
  }
  if (host.find(',') != std::string::npos) return "one host a line: a ',' would make mpirun place ranks on two";
  if (host[0] == '-' || host[0] == '.') return "a host name cannot begin with '" + host.substr(0, 1) + "'";
  for (const char c : host) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!plain) {
      const bool ascii = static_cast<unsigned char>(c) < 0x80;
      return "not a host name (letters, digits, '.', '-' and '_'; found " +
             (ascii ? "'" + std::string(1, c) + "'" : std::string("a letter outside ASCII")) + ")";
    }
  }
  return "";
}

}  // namespace

StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string where = source + ":" + std::to_string(number) + ": ";
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    HostSlots entry;
    if (!(words >> entry.host)) continue;
    if (const std::string problem = HostNameProblem(entry.host); !problem.empty()) {
      return Status::InvalidArgument(where + "\"" + entry.host + "\": " + problem);
    }
    std::string word;
    std::string max_slots_word;  // the max_slots=N word, if any
    int max_slots = 0;
    bool has_slots = false;
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq == std::string::npos || (key != "slots" && key != "max_slots" && key != "max-slots")) {
        return Status::InvalidArgument(where + "\"" + word + "\": expected slots=N after the host name");
      }
      int value = 0;
      try {
        size_t used = 0;
        value = std::stoi(word.substr(eq + 1), &used);
        if (used != word.size() - eq - 1) throw std::invalid_argument(word);
      } catch (const std::out_of_range&) {
        value = kMaxSlotsPerHost + 1;  // a number, and too large: said below
      } catch (const std::exception&) {
        return Status::InvalidArgument(where + "\"" + word + "\": the count must be a number");
      }
      if (value < 1) return Status::InvalidArgument(where + "\"" + word + "\": the count must be at least 1");
      if (value > kMaxSlotsPerHost) {
        return Status::InvalidArgument(where + "\"" + word + "\": the count is too large (at most " +
                                       std::to_string(kMaxSlotsPerHost) + " processes a host)");
      }
      if ((key == "slots" && has_slots) || (key != "slots" && !max_slots_word.empty())) {
        return Status::InvalidArgument(where + "\"" + word + "\": " + (key == "slots" ? "slots" : "max_slots") +
                                       " is given twice on this line");
      }
      if (key == "slots") {
        entry.slots = value;
        has_slots = true;
      } else {
        max_slots = value;
        max_slots_word = word;
      }
    }
    // Open MPI's max_slots caps how far a host may be oversubscribed and gives it no slots: a
    // line with max_slots alone would count as one slot without a word.
    if (max_slots > 0 && !has_slots) {
      return Status::InvalidArgument(where + "\"" + max_slots_word +
                                     "\" gives no slots (it caps oversubscription in Open MPI); psformer places "
                                     "slots=N processes on a host: write \"" +
                                     entry.host + " slots=" + std::to_string(max_slots) + "\"");
    }
    if (max_slots > 0 && entry.slots > max_slots) {
      return Status::InvalidArgument(where + "slots=" + std::to_string(entry.slots) + " is more than " +
                                     max_slots_word);
    }
    if (!seen.insert(entry.host).second) {
      return Status::InvalidArgument(where + "host " + entry.host + " is listed twice");
    }
    hosts.push_back(entry);
  }
  if (hosts.empty()) return Status::InvalidArgument(source + ": lists no hosts");
  return hosts;
}

StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path) {
  std::error_code ec;
  // A directory opens as a stream that reads nothing: say what it is rather than "no hosts".
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument("hostfile " + path + " is a directory; name a file of hosts, one a line");
  }
  PSF_ASSIGN_OR_RETURN(const std::string text, ReadFileBytes(path, "hostfile", kMaxTextFileBytes));
  return ParseHostfile(text, path);
}

std::string SilentHosts(const std::vector<std::string>& hosts, const std::vector<bool>& answers,
                        const std::vector<std::string>& why) {
  std::string silent;
  bool reasons = false;
  for (size_t i = 0; i < hosts.size() && i < answers.size(); ++i)
    reasons |= !answers[i] && i < why.size() && !why[i].empty();
  for (size_t i = 0; i < hosts.size() && i < answers.size(); ++i) {
    if (answers[i]) continue;
    if (!silent.empty()) silent += reasons ? "; " : ", ";
    silent += hosts[i];
    if (i < why.size() && !why[i].empty()) silent += ": " + why[i];
  }
  return silent;
}

StatusOr<std::vector<HostSlots>> SelectHosts(const std::vector<HostSlots>& hosts, const std::vector<bool>& answers,
                                             int processes, const std::vector<std::string>& why) {
  std::vector<HostSlots> chosen;
  int slots = 0;
  int answering_slots = 0;
  std::vector<std::string> names;
  for (const HostSlots& h : hosts) names.push_back(h.host);
  const std::string silent = SilentHosts(names, answers, why);
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (i < answers.size() && !answers[i]) continue;
    answering_slots += hosts[i].slots;
    if (slots >= processes) continue;
    HostSlots used = hosts[i];
    used.slots = std::min(used.slots, processes - slots);
    slots += used.slots;
    chosen.push_back(used);
  }
  if (slots < processes) {
    return Status::Unavailable("the job needs " + std::to_string(processes) + " process slot(s) but the hosts that " +
                               "answer have " + std::to_string(answering_slots) +
                               (silent.empty() ? "" : " (no answer from " + silent + ")") +
                               "; add hosts to the hostfile or start fewer processes (-np)");
  }
  return chosen;
}

}  // namespace psformer
