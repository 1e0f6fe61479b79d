// The result type of every hand-written kernel body and of the generated
// glue around it. The glue turns it into the caller's error: an
// xla::ffi::Error, an XLA legacy status, or a Python exception.
#pragma once

#include <string>
#include <utility>

namespace opgen {

enum class StatusCode {
  kOk,
  kInvalidArgument,  // the caller's data or shapes are wrong
  kInternal,         // the kernel or the runtime below it failed
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // success

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace opgen
