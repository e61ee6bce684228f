#pragma once
/// bench_handoff's processes: a child on pipes (an endpoint, an iperf3 server), a command
/// run to its end, free ports. run_capture and free_ports are in processes.cpp.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/spawn/child.hpp"
#include "bench/handoff/common.hpp"

namespace vidline::bench::handoff {

/// A child process, its stdin and stdout on pipes (stderr to a log file).
class child {
public:
  child(const std::vector<std::string>& argv, const std::string& log_path, bool piped) {
    int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    if (piped && (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0))
      die("pipe failed");
    // The project's spawner: a group of its own, killed with the bench however it dies
    // (iperf3 -s in a namespace must not outlive it).
    vidline::spawn::child_spec cs;
    cs.argv = argv;
    cs.env = vidline::spawn::current_environment();
    cs.stdout_path = cs.stderr_path = log_path;
    cs.append = true;
    if (piped) {
      cs.stdin_fd = in_pipe[0];
      cs.stdout_fd = out_pipe[1];
      cs.stdout_path.clear();  // stderr alone to the log
    }
    std::string error;
    pid_ = vidline::spawn::spawn_child(cs, error);
    if (pid_ < 0)
      die(error);
    children().push_back(pid_);
    if (piped) {
      ::close(in_pipe[0]);
      ::close(out_pipe[1]);
      in_ = in_pipe[1];
      out_ = out_pipe[0];
    }
    name_ = argv.size() > 4 ? argv[0] + " ... " + argv[4] : argv[0];
  }
  ~child() { stop(); }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  pid_t pid() const { return pid_; }

  void send(const std::string& line) {
    const std::string l = line + "\n";
    if (::write(in_, l.data(), l.size()) != static_cast<ssize_t>(l.size()))
      die("cannot write to " + name_);
  }

  /// The next line of output; dies on end of output or after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout) {
    const auto deadline = steady::now() + timeout;
    for (;;) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              steady::now());
      if (left.count() <= 0)
        die(name_ + ": no answer in " + std::to_string(timeout.count()) + " ms");
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
        die("poll failed");
      if (p.revents & (POLLIN | POLLHUP)) {
        char tmp[4096];
        const ssize_t n = ::read(out_, tmp, sizeof tmp);
        if (n <= 0)
          die(name_ + " ended (see its log)");
        buf_.append(tmp, static_cast<std::size_t>(n));
      }
    }
  }

  /// Peak resident set (VmHWM) in KiB, from /proc.
  long vm_hwm_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmHWM:", 0) == 0)
        return std::stol(line.substr(6));
    die("no VmHWM for pid " + std::to_string(pid_));
  }

  /// CPU time of each of its threads so far, in ms, by thread id
  /// (/proc/<pid>/task/*/schedstat).
  std::map<std::string, double> thread_cpu_ms() const {
    std::map<std::string, double> r;
    for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid_) + "/task")) {
      std::ifstream in(t.path() / "schedstat");
      double on_cpu_ns = 0;
      if (in >> on_cpu_ns)
        r[t.path().filename().string()] = on_cpu_ns / 1e6;
    }
    return r;
  }

  /// Ends the child (quit on stdin, then SIGTERM, then SIGKILL) and reaps it.
  void stop() {
    if (pid_ <= 0)
      return;
    const bool piped = in_ >= 0;
    if (piped) {
      [[maybe_unused]] auto n = ::write(in_, "quit\n", 5);
      ::close(in_);
      in_ = -1;
    }
    for (int sig : {0, SIGTERM, SIGKILL}) {
      if (sig == 0 && !piped)
        continue;  // only an endpoint reads "quit"
      if (sig != 0)
        ::kill(pid_, sig);
      const auto deadline = steady::now() + std::chrono::seconds(3);
      while (steady::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          auto& all = children();
          all.erase(std::remove(all.begin(), all.end(), pid_), all.end());
          pid_ = -1;
          if (out_ >= 0)
            ::close(out_);
          out_ = -1;
          return;
        }
        ::usleep(2000);
      }
    }
  }

private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
  std::string name_;
};

/// Runs a command to its end; its stdout, or dies when it fails.
std::string run_capture(const std::vector<std::string>& argv, const std::string& log_path,
                        int* rc = nullptr);

std::vector<int> free_ports(int n);

} // namespace vidline::bench::handoff
