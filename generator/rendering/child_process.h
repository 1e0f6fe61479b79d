// A child process that opgen talks to through its stdin and stdout (the
// renderer, renderer.h); its stderr is opgen's.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace opgen::gen {

class ChildProcess {
 public:
  // Starts `argv` (argv[0] a path) with `env` (NAME=VALUE entries) as its
  // whole environment. It dies with this process (when the thread that
  // started it ends), so that a killed opgen leaves nothing behind. Throws
  // std::runtime_error when it cannot be started.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env);
  // Kills it unless it has been waited for (its own children go with it
  // where they asked to, as the renderer's workers do).
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Writes all of `bytes` to its stdin, then closes it; false when it no
  // longer reads (opgen ignores SIGPIPE: main.cc).
  bool send_and_close(const std::string& bytes);
  // Reads up to `size` bytes of its stdout into `buffer`: 0 at its end, -1 on error.
  ssize_t read_some(char* buffer, size_t size);
  // Waits for it to end; "" when it exited 0, else how it ended ("exit status 1").
  std::string wait();

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
};

}  // namespace opgen::gen
