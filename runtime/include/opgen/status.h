// The result type of every hand-written kernel body and of the generated
// glue around it. The glue turns it into the caller's error: an
// xla::ffi::Error, an XLA legacy status, or a Python exception.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace opgen {

enum class StatusCode {
  kOk,
  kInvalidArgument,  // the caller's data or shapes are wrong
  kInternal,         // the kernel or the runtime below it failed
};

// A success is one null pointer, which every layer of a call returns and
// moves for free; a failure holds its code and message on the heap.
class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(const Status& other) : failure_(other.failure_ ? std::make_unique<Failure>(*other.failure_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) failure_ = other.failure_ ? std::make_unique<Failure>(*other.failure_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }

  bool ok() const { return failure_ == nullptr; }
  StatusCode code() const { return failure_ ? failure_->code : StatusCode::kOk; }
  const std::string& message() const { return failure_ ? failure_->message : no_message(); }

 private:
  struct Failure {
    StatusCode code;
    std::string message;
  };

  Status(StatusCode code, std::string message)
      : failure_(std::make_unique<Failure>(Failure{code, std::move(message)})) {}

  static const std::string& no_message() {
    static const std::string empty;
    return empty;
  }

  std::unique_ptr<Failure> failure_;
};

}  // namespace opgen
