#include "nodes/state/node_lock.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "common/files.hpp"

namespace vidline::nodes::state {
namespace {

std::string errno_text() { return std::strerror(errno); }

struct flock whole_file(short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // to the end, however long
  return fl;
}

std::string random_token() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string read_fd(int fd) {
  std::string text;
  char buf[4096];
  off_t at = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || text.size() > 64 * 1024)
      return text;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
}

/// Fills `info`'s text fields from `text` when it names `info.pid`; false otherwise.
bool parse_text(const std::string& text, node_lock_info& info) {
  std::istringstream in(text);
  node_lock_info got;
  long pid = 0;
  for (std::string line; std::getline(in, line);) {
    auto sp = line.find(' ');
    if (sp == std::string::npos)
      continue;
    std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key == "pid")
      pid = std::strtol(value.c_str(), nullptr, 10);
    else if (key == "token")
      got.token = value;
    else if (key == "host")
      got.host = value;
    else if (key == "config_digest")
      got.config_digest = value;
    else if (key == "config")
      got.config = value;
  }
  if (pid != info.pid || got.token.empty())
    return false;
  info.token = got.token;
  info.host = got.host;
  info.config_digest = got.config_digest;
  info.config = got.config;
  return true;
}

} // namespace

std::string node_lock_path(const std::string& data_dir) { return data_dir + "/run/node.lock"; }

node_lock::node_lock(const std::string& data_dir, const std::string& host,
                     const std::string& config_digest, const std::string& config)
    : path_(node_lock_path(data_dir)), token_(random_token()) {
  files::make_dirs(data_dir + "/run");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open " + path_ + ": " + errno_text());
  struct flock fl = whole_file(F_WRLCK);
  if (::fcntl(fd_, F_SETLK, &fl) != 0) {
    int e = errno;
    node_lock_info holder;
    struct flock q = whole_file(F_WRLCK);
    if ((e == EAGAIN || e == EACCES) && ::fcntl(fd_, F_GETLK, &q) == 0 && q.l_type != F_UNLCK) {
      holder.pid = q.l_pid;
      parse_text(read_fd(fd_), holder);
    }
    ::close(fd_);
    fd_ = -1;
    if (e == EAGAIN || e == EACCES)
      throw node_lock_busy("data directory " + data_dir + " is in use by another vidline node (pid " +
                             std::to_string(holder.pid) + (holder.host.empty() ? "" : ", host " + holder.host) +
                             "), which holds " + path_ + "; stop it first (vidline stop)",
                           holder);
    throw std::runtime_error("cannot lock " + path_ + ": " + std::strerror(e));
  }
  std::string text = "pid " + std::to_string(::getpid()) + "\ntoken " + token_ + "\nhost " + host +
                     "\nconfig_digest " + config_digest + "\nconfig " + config + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    std::string why = errno_text();
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("cannot write " + path_ + ": " + why);
  }
}

node_lock::~node_lock() {
  if (fd_ >= 0)
    ::close(fd_);  // drops the lock; the file stays (its text is a past life's, and says so)
}

std::optional<node_lock_info> node_lock_holder(const std::string& data_dir, double settle_s) {
  const std::string path = node_lock_path(data_dir);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && (errno == EACCES || errno == EROFS))
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT)
      return std::nullopt;
    throw std::runtime_error("cannot open " + path + ": " + errno_text());
  }
  struct flock q = whole_file(F_WRLCK);
  if (::fcntl(fd, F_GETLK, &q) != 0) {
    std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("cannot query the lock of " + path + ": " + why);
  }
  if (q.l_type == F_UNLCK) {
    ::close(fd);
    return std::nullopt;
  }
  node_lock_info info;
  info.pid = q.l_pid;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(settle_s);
  while (!parse_text(read_fd(fd), info) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::close(fd);
  return info;
}

} // namespace vidline::nodes::state
