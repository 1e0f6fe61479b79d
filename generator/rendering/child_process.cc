#include "rendering/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "system/write_all.h"

namespace opgen::gen {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Everything the child needs is made before the fork: between fork and
  // exec a process that may run threads can only make system calls.
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0) throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  if (::pipe2(from_child, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(to_child[0]);
    ::close(to_child[1]);
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(e));
  }
  // Room for a few files in the pipe, so that the renderer's processes go on
  // rendering while opgen writes a file (64 KiB by default; the most an
  // unprivileged process may ask is /proc/sys/fs/pipe-max-size, 1 MiB by
  // default; failing, the pipe keeps its size).
  ::fcntl(from_child[1], F_SETPIPE_SZ, 1 << 20);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    // dup2 leaves the new descriptors open across exec; the others close there.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent ||
        ::dup2(to_child[0], STDIN_FILENO) < 0 || ::dup2(from_child[1], STDOUT_FILENO) < 0) {
      ::_exit(127);
    }
    // The child takes the default SIGPIPE back (exec keeps an ignored signal ignored).
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(to_child[0]);
  ::close(from_child[1]);
  stdin_fd_ = to_child[1];
  stdout_fd_ = from_child[0];
  if (pid_ < 0) {
    ::close(stdin_fd_);
    ::close(stdout_fd_);
    throw std::runtime_error(std::string("cannot start ") + argv[0] + ": " + std::strerror(fork_errno));
  }
}

ChildProcess::~ChildProcess() {
  // Killed before its pipes close, so that it never finds them closed.
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

bool ChildProcess::send_and_close(const std::string& bytes) {
  const bool sent = write_all(stdin_fd_, bytes);
  ::close(stdin_fd_);
  stdin_fd_ = -1;
  return sent;
}

ssize_t ChildProcess::read_some(char* buffer, size_t size) {
  for (;;) {
    const ssize_t n = ::read(stdout_fd_, buffer, size);
    if (n >= 0 || errno != EINTR) return n;
  }
}

std::string ChildProcess::wait() {
  ::close(stdout_fd_);
  stdout_fd_ = -1;
  int status = 0;
  pid_t waited;
  while ((waited = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (waited < 0) return std::string("cannot wait for it: ") + std::strerror(errno);
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 ? "" : "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace opgen::gen
