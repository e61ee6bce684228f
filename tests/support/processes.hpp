#pragma once
// Real processes for integration tests: a temporary directory, free loopback ports, child
// processes with their output in files, and waits with deadlines (never sleep-and-hope).

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "common/spawn/child.hpp"

namespace testing_support {

/// A directory removed at the end unless the test failed (VIDLINE_KEEP_TMP=1 keeps all).
class temp_dir {
public:
  explicit temp_dir(const char* prefix = "vl-test") {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~temp_dir() {
    if (std::getenv("VIDLINE_KEEP_TMP") == nullptr && !keep_) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  void keep() { keep_ = true; }
  const std::string& path() const { return path_; }

private:
  std::string path_;
  bool keep_ = false;
};

inline std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds)
    ::close(fd);
  return ports;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A child process; killed (SIGKILL) when it goes out of scope still running.
class process {
public:
  process(std::vector<std::string> args, const std::string& out_file) : out_(out_file) {
    // The project's spawner: a process group of its own, killed if the test dies.
    vidline::spawn::child_spec cs;
    cs.argv = std::move(args);
    cs.env = vidline::spawn::current_environment();
    cs.stdout_path = out_file;
    cs.stderr_path = out_file + ".err";
    std::string error;
    pid_ = vidline::spawn::spawn_child(cs, error);
    if (pid_ < 0)
      throw std::runtime_error(error);
  }
  ~process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  process(const process&) = delete;
  process& operator=(const process&) = delete;

  bool running() {
    if (exited_)
      return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      record(st);
      return false;
    }
    return true;
  }
  void signal(int sig) { ::kill(pid_, sig); }

  /// Waits up to `seconds` for the exit; the exit code (128+signal), or -1 on timeout.
  int wait(double seconds) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline)
        return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a child's exit
    }
    return code_;
  }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(out_ + ".err"); }
  pid_t pid() const { return pid_; }

private:
  void record(int st) {
    exited_ = true;
    code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  pid_t pid_ = 0;
  std::string out_;
  bool exited_ = false;
  int code_ = -1;
};

} // namespace testing_support
