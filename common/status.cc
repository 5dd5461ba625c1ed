#include "common/status.h"

namespace psformer {

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      name = "invalid argument";
      break;
    case Code::kNotFound:
      name = "not found";
      break;
    case Code::kIoError:
      name = "I/O error";
      break;
    case Code::kCorruption:
      name = "corruption";
      break;
    case Code::kUnavailable:
      name = "unavailable";
      break;
    case Code::kInternal:
      name = "internal error";
      break;
    case Code::kUnimplemented:
      name = "not implemented";
      break;
    case Code::kAborted:
      name = "aborted";
      break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace psformer
