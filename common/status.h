// Status and StatusOr: how everything that can fail at run time reports it.
// A Status is OK or carries a code and a message that says what failed and where. Both are
// [[nodiscard]]: a caller passes a failure up, handles it, or says why it may be dropped.
#ifndef PSFORMER_COMMON_STATUS_H_
#define PSFORMER_COMMON_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace psformer {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk,
    kInvalidArgument,
    kNotFound,
    kIoError,
    kCorruption,
    kUnavailable,
    kInternal,
    kUnimplemented,
    kAborted
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  static Status Unimplemented(std::string msg) { return Status(Code::kUnimplemented, std::move(msg)); }
  // The operation was overtaken by an event the caller must act on (e.g. a recovery rollback).
  static Status Aborted(std::string msg) { return Status(Code::kAborted, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsIoError() const { return code_ == Code::kIoError; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsUnavailable() const { return code_ == Code::kUnavailable; }
  bool IsInternal() const { return code_ == Code::kInternal; }
  bool IsUnimplemented() const { return code_ == Code::kUnimplemented; }
  bool IsAborted() const { return code_ == Code::kAborted; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design.
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr built from an OK status carries no value");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace psformer

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define PSF_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::psformer::Status _psf_status = (expr);   \
    if (!_psf_status.ok()) return _psf_status; \
  } while (0)

#define PSF_CONCAT_INNER(a, b) a##b
#define PSF_CONCAT(a, b) PSF_CONCAT_INNER(a, b)
// `PSF_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its Status.
#define PSF_ASSIGN_OR_RETURN(lhs, expr) PSF_ASSIGN_OR_RETURN_IMPL(PSF_CONCAT(_psf_or_, __LINE__), lhs, expr)
#define PSF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // PSFORMER_COMMON_STATUS_H_
