#include "common/status.h"

#include <iterator>

#include "common/enum_name.h"

namespace psformer {

std::string Status::ToString() const {
  if (code_ == Code::kOk) return "OK";
  static constexpr const char* kNames[] = {"OK",         "invalid argument", "not found",      "I/O error",
                                           "corruption", "unavailable",      "internal error", "not implemented",
                                           "aborted"};
  static_assert(std::size(kNames) == static_cast<size_t>(Code::kAborted) + 1, "a name for every code");
  return std::string(EnumName(code_, kNames, "unknown code")) + ": " + message_;
}

}  // namespace psformer
