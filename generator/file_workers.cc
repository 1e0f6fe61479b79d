#include "file_workers.h"

#include <Python.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <limits>
#include <new>
#include <stdexcept>

#include "output_writer.h"

namespace opgen::gen {
namespace {

// The index of the next file to render, shared by the parent and its forked
// workers (it lives in a MAP_SHARED page). Each takes one file at a time, so
// the work balances itself: a worker given the large package-wide modules,
// or a CPU that the machine is busy with, simply takes fewer files.
class SharedCounter {
 public:
  SharedCounter() {
    void* p = ::mmap(nullptr, sizeof(std::atomic<size_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) next_ = new (p) std::atomic<size_t>(0);
  }
  ~SharedCounter() {
    if (next_ != nullptr) ::munmap(next_, sizeof(std::atomic<size_t>));
  }
  SharedCounter(const SharedCounter&) = delete;
  SharedCounter& operator=(const SharedCounter&) = delete;
  bool ok() const { return next_ != nullptr; }
  size_t take() { return next_->fetch_add(1); }
  // After a failure: the other workers take nothing more (the run fails anyway).
  void stop() { next_->store(std::numeric_limits<size_t>::max() / 2); }

 private:
  std::atomic<size_t>* next_ = nullptr;
};
static_assert(std::atomic<size_t>::is_always_lock_free, "the counter must work across processes");

// Renders and writes files until none is left; `done` gets the index of each
// one handled. Returns "" or the error.
std::string run_share(Renderer& renderer, OutputFolder& folder, SharedCounter& next,
                      std::vector<FileOutcome>& outcomes, std::vector<size_t>& done) {
  for (size_t i; (i = next.take()) < renderer.file_count();) {
    std::string contents;
    try {
      contents = renderer.render(i);
    } catch (const std::exception& e) {
      next.stop();
      return e.what();
    }
    FileOutcome& out = outcomes[i];
    std::string error;
    const WriteResult r = folder.write_if_changed(renderer.path(i), contents, error);
    if (r == WriteResult::kFailed) {
      next.stop();
      return error;
    }
    out.written = r == WriteResult::kWritten;
    done.push_back(i);
  }
  return "";
}

// A worker's report: one record per file it handled ("W" or "U" and the
// index; the parent knows the paths) or one error record ("E" and the
// message); records end with '\0'.
std::string report(const std::vector<FileOutcome>& outcomes, const std::vector<size_t>& done,
                   const std::string& error) {
  if (!error.empty()) return "E" + error + '\0';
  std::string out;
  for (size_t i : done) out += (outcomes[i].written ? "W" : "U") + std::to_string(i) + '\0';
  return out;
}

// Reads one worker's report into `outcomes`; returns "" or the error.
std::string read_report(int fd, std::vector<FileOutcome>& outcomes) {
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  for (size_t at = 0; at < bytes.size();) {
    const size_t end = bytes.find('\0', at);
    if (end == std::string::npos || end == at) return "a render worker sent a malformed report";
    const std::string record = bytes.substr(at, end - at);
    at = end + 1;
    if (record[0] == 'E') return record.substr(1);
    const size_t index = std::strtoull(record.c_str() + 1, nullptr, 10);
    if (index >= outcomes.size()) return "a render worker sent a malformed report";
    outcomes[index].written = record[0] == 'W';
  }
  return "";
}

}  // namespace

size_t default_workers() {
  cpu_set_t set;
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return static_cast<size_t>(std::clamp(cpus, 1, 8));
}

std::string render_and_write(Renderer& renderer, OutputFolder& folder, size_t workers,
                             std::vector<FileOutcome>& outcomes) {
  outcomes.assign(renderer.file_count(), FileOutcome{});
  for (size_t i = 0; i < outcomes.size(); ++i) outcomes[i].path = folder.shown(renderer.path(i));
  workers = std::max<size_t>(1, std::min(workers, renderer.file_count()));
  struct Child {
    pid_t pid;
    int fd;
  };
  std::vector<Child> children;
  std::string error;
  SharedCounter next;
  if (!next.ok()) return "cannot map memory to share the files among render workers";
  // Nothing may sit in a stdio buffer when the process forks, or it would
  // be printed once per worker.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  for (size_t w = 1; w < workers && error.empty(); ++w) {
    int fds[2];
    if (::pipe(fds) != 0) {
      error = "cannot create a pipe for a render worker";
      break;
    }
    const pid_t parent = ::getpid();
    PyOS_BeforeFork();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // A worker dies with its parent, so that a killed run leaves nothing
      // writing into the folder (nor holding its lock, which the worker's
      // copy of the descriptor shares). The signal comes when the thread that
      // forked ends: this one, which waits for the workers. A parent that died
      // before prctl is seen in getppid().
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
      PyOS_AfterFork_Child();
      ::close(fds[0]);
      std::vector<size_t> done;
      const std::string failure = run_share(renderer, folder, next, outcomes, done);
      const bool sent = write_all(fds[1], report(outcomes, done, failure));
      // No Python finalization and no destructors: the parent owns them.
      ::_exit(sent ? 0 : 1);
    }
    PyOS_AfterFork_Parent();
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      error = "cannot start a render worker (fork failed)";
      break;
    }
    children.push_back({pid, fds[0]});
  }
  std::vector<size_t> done;
  if (error.empty()) error = run_share(renderer, folder, next, outcomes, done);
  for (const Child& c : children) {
    std::string failure = read_report(c.fd, outcomes);
    ::close(c.fd);
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failure = "a render worker stopped abnormally";
    }
    if (error.empty()) error = failure;
  }
  return error;
}

}  // namespace opgen::gen
