// The result type of every hand-written kernel body and of the generated
// glue around it. The glue turns it into the caller's error: an
// xla::ffi::Error, an XLA legacy status, or a Python exception.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace opgen {

// What kind of failure a Status is. Each binding maps the kind to its
// framework's error in one place: Python's TypeError, ValueError or
// RuntimeError (xla_module.cc, raise_status), the typed FFI's error codes
// (xla_ffi_error.h, to_ffi_error); PyTorch's kernels raise every kind as the
// RuntimeError torch's own kernels raise (torch_stable.h, torch_eager.cc),
// and XLA's legacy status carries the message alone.
enum class ErrorKind {
  kOk,
  kWrongType,        // an argument of the wrong type: an input's dtype
  kInvalidArgument,  // the caller's data, shapes or values are wrong
  kInternal,         // the kernel or the runtime below it failed
};

// A success is one null pointer, which every layer of a call returns and
// moves for free; a failure holds its kind and message on the heap.
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
  static Status WrongType(std::string message) { return Status(ErrorKind::kWrongType, std::move(message)); }
  static Status InvalidArgument(std::string message) {
    return Status(ErrorKind::kInvalidArgument, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(ErrorKind::kInternal, std::move(message));
  }

  bool ok() const { return failure_ == nullptr; }
  ErrorKind kind() const { return failure_ ? failure_->kind : ErrorKind::kOk; }
  const std::string& message() const { return failure_ ? failure_->message : no_message(); }

 private:
  struct Failure {
    ErrorKind kind;
    std::string message;
  };

  Status(ErrorKind kind, std::string message)
      : failure_(std::make_unique<Failure>(Failure{kind, std::move(message)})) {}

  static const std::string& no_message() {
    static const std::string empty;
    return empty;
  }

  std::unique_ptr<Failure> failure_;
};

}  // namespace opgen
