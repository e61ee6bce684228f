#include "common/files.hpp"

#include "common/crash_points.hpp"
#include "common/sha256.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace vidline::files {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

} // namespace

void fsync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open", path);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail("cannot fsync", path);
  }
  ::close(fd);
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open directory", dir);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    fail("cannot fsync directory", dir);
  }
  ::close(fd);
}

std::string parent_of(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? std::string(".") : p;
}

std::string rotated_name(const std::string& path, int n) {
  std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  p.replace_extension();
  return p.string() + "." + std::to_string(n) + ext;
}

bool cap_appended_log(const std::string& path, uint64_t max_bytes, int keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size <= max_bytes || keep < 1)
    return false;
  fs::remove(rotated_name(path, keep), ec);
  for (int i = keep - 1; i >= 1; --i) {
    ec.clear();
    if (fs::exists(rotated_name(path, i), ec))
      fs::rename(rotated_name(path, i), rotated_name(path, i + 1), ec);
  }
  ec.clear();
  fs::copy_file(path, rotated_name(path, 1), fs::copy_options::overwrite_existing, ec);
  if (ec)
    return false;
  fs::resize_file(path, 0, ec);
  return !ec;
}

void rename_durable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail("cannot rename " + from + " to", to);
  fsync_dir(parent_of(to));
}

void write_atomic(const std::string& path, std::string_view contents, const char* crash_point) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail("cannot create", tmp);
  const char* p = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = e;
      fail("cannot write", tmp);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = e;
    fail("cannot fsync", tmp);
  }
  ::close(fd);
  if (crash_point != nullptr)
    crash::point(crash_point);
  rename_durable(tmp, path);
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create directory " + dir + ": " + ec.message());
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("cannot read", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string copy_verified(const std::string& from, const std::string& sha, const std::string& dest,
                          uint64_t& bytes) {
  const std::string part = dest + ".part";
  const int src = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (src < 0)
    return "cannot open " + from + ": " + std::strerror(errno);
  const int out = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const std::string why = "cannot create " + part + ": " + std::strerror(errno);
    ::close(src);
    return why;
  }
  auto fail = [&](std::string why) {
    ::close(src);
    if (out >= 0)
      ::close(out);
    std::error_code ec;
    std::filesystem::remove(part, ec);
    return why;
  };
  sha256 h;
  uint64_t total = 0;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(src, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return fail("cannot read " + from + ": " + std::strerror(errno));
    if (n == 0)
      break;
    h.update(buf.data(), static_cast<std::size_t>(n));
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return fail("cannot write " + part + ": " + std::strerror(errno));
      done += w;
    }
    total += static_cast<uint64_t>(n);
  }
  const std::string got = to_hex(h.finish());
  if (got != sha)
    return fail(from + " hashes to " + got + ", not " + sha + " (nothing kept)");
  if (::fsync(out) != 0)
    return fail("cannot fsync " + part + ": " + std::strerror(errno));
  ::close(src);
  ::close(out);
  try {
    rename_durable(part, dest);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(part, ec);
    return e.what();
  }
  bytes = total;
  return "";
}

} // namespace vidline::files
