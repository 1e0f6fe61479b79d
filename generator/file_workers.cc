#include "file_workers.h"

#include <Python.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "output_writer.h"

namespace opgen {
namespace {

// Renders and writes the files of one worker; returns "" or the error.
std::string run_share(Renderer& renderer, OutputFolder& folder, size_t worker, size_t workers,
                      std::vector<FileOutcome>& outcomes) {
  for (size_t i = worker; i < renderer.file_count(); i += workers) {
    RenderedFile file;
    try {
      file = renderer.render(i);
    } catch (const std::exception& e) {
      return e.what();
    }
    FileOutcome& out = outcomes[i];
    std::string error;
    const WriteResult r = folder.write_if_changed(out.path, file.contents, error);
    if (r == WriteResult::kFailed) return error;
    out.written = r == WriteResult::kWritten;
  }
  return "";
}

bool write_all(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A worker's report: one record per file it handled ("W" or "U" and the
// index; the parent knows the paths) or one error record ("E" and the
// message); records end with '\0'.
std::string report(const std::vector<FileOutcome>& outcomes, size_t worker, size_t workers, const std::string& error) {
  if (!error.empty()) return "E" + error + '\0';
  std::string out;
  for (size_t i = worker; i < outcomes.size(); i += workers) {
    out += (outcomes[i].written ? "W" : "U") + std::to_string(i) + '\0';
  }
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

std::string render_and_write(Renderer& renderer, const std::string& output_dir, size_t workers,
                             std::vector<FileOutcome>& outcomes) {
  outcomes.assign(renderer.file_count(), FileOutcome{});
  for (size_t i = 0; i < outcomes.size(); ++i) {
    outcomes[i].path = (std::filesystem::path(output_dir) / renderer.path(i)).lexically_normal().string();
  }
  workers = std::max<size_t>(1, std::min(workers, renderer.file_count()));
  struct Child {
    pid_t pid;
    int fd;
  };
  std::vector<Child> children;
  std::string error;
  OutputFolder folder(output_dir);  // listed once, before the workers fork
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
    PyOS_BeforeFork();
    const pid_t pid = ::fork();
    if (pid == 0) {
      PyOS_AfterFork_Child();
      ::close(fds[0]);
      const std::string failure = run_share(renderer, folder, w, workers, outcomes);
      const bool sent = write_all(fds[1], report(outcomes, w, workers, failure));
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
  if (error.empty()) error = run_share(renderer, folder, 0, workers, outcomes);
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

}  // namespace opgen
