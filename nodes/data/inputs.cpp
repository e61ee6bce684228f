/// A host's inputs (inputs.hpp).

#include "nodes/data/inputs.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/files.hpp"

namespace vidline::nodes::data {
namespace {

std::string errno_text() { return std::strerror(errno); }

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

msg::input_put_reply answer(const std::string& sha, bool done, uint64_t next, std::string error) {
  msg::input_put_reply r;
  r.sha256 = is_sha256_hex(sha) ? sha : std::string();
  r.done = done;
  r.next = next;
  r.error = std::move(error);
  return r;
}

} // namespace

input_store::input_store(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

input_store::~input_store() {
  while (!uploads_.empty())
    drop(uploads_.begin());
}

std::optional<uint64_t> input_store::size_of(const std::string& sha) const {
  if (dir_.empty() || !is_sha256_hex(sha))
    return std::nullopt;
  struct stat st {};
  const std::string path = dir_ + "/" + sha;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

void input_store::drop(std::map<std::string, upload>::iterator it) {
  if (it->second.fd >= 0)
    ::close(it->second.fd);
  std::error_code ec;
  std::filesystem::remove(it->second.part, ec);
  uploads_.erase(it);
}

std::string input_store::new_part(const std::string& sha) {
  // Unique per process and upload: two uploads of one input (or two stores on the folder)
  // never share a part file.
  return fmt::format("{}/.{}.{}-{}.part", dir_, sha, ::getpid(), ++counter_);
}

std::string input_store::finish(upload& u) {
  const std::string got = to_hex(u.hash.finish());
  if (got != u.sha256)
    return "the bytes hash to " + got + ", not " + u.sha256 + " (nothing kept)";
  if (::fsync(u.fd) != 0)
    return "cannot fsync " + u.part + ": " + errno_text();
  ::close(u.fd);
  u.fd = -1;
  const std::string dest = dir_ + "/" + u.sha256;
  if (size_of(u.sha256) == u.total)
    return "";  // stored meanwhile by another upload: same digest, same bytes
  try {
    files::rename_durable(u.part, dest);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

msg::input_put_reply input_store::put(const std::string& who, const msg::input_put& p) {
  if (dir_.empty())
    return answer(p.sha256, false, 0, "this node keeps no inputs");
  if (!is_sha256_hex(p.sha256))
    return answer(p.sha256, false, 0, "sha256 must be 64 lowercase hex digits");
  if (p.total == 0)
    return answer(p.sha256, false, 0, "an input of 0 bytes: a reference image is not empty");
  if (p.total > max_bytes_)
    return answer(p.sha256, false, 0,
                  fmt::format("an input of {} bytes is over the limit of {} bytes", p.total,
                              max_bytes_));
  const std::size_t n = p.data.size;
  if (p.offset > p.total || n > p.total - p.offset)
    return answer(p.sha256, false, 0, "the chunk ends past the input's total");
  const std::string key = who + " " + p.sha256;
  auto it = uploads_.find(key);
  if (p.offset == 0) {
    if (auto have = size_of(p.sha256)) {
      if (it != uploads_.end())
        drop(it);
      if (*have != p.total)
        return answer(p.sha256, false, 0,
                      fmt::format("this node holds input {} of {} bytes, not {}", p.sha256,
                                  *have, p.total));
      return answer(p.sha256, true, p.total, "");  // stored and verified before
    }
    if (n == 0)
      return answer(p.sha256, false, 0, "");  // the probe: not stored, send it
    if (it != uploads_.end())
      drop(it);
    if (uploads_.size() >= max_uploads) {
      auto oldest = uploads_.begin();
      for (auto j = uploads_.begin(); j != uploads_.end(); ++j)
        if (j->second.touched < oldest->second.touched)
          oldest = j;
      drop(oldest);
    }
    try {
      files::make_dirs(dir_);
    } catch (const std::exception& e) {
      return answer(p.sha256, false, 0, e.what());
    }
    upload u;
    u.sha256 = p.sha256;
    u.part = new_part(p.sha256);
    u.total = p.total;
    u.fd = ::open(u.part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (u.fd < 0)
      return answer(p.sha256, false, 0, "cannot open " + u.part + ": " + errno_text());
    it = uploads_.emplace(key, std::move(u)).first;
  } else if (it == uploads_.end() || it->second.total != p.total || it->second.next != p.offset) {
    // Out of order (a lost reply, a dropped upload): say where to go on from.
    const uint64_t next =
        it == uploads_.end() || it->second.total != p.total ? 0 : it->second.next;
    return answer(p.sha256, false, next, "");
  }
  upload& u = it->second;
  u.touched = ++counter_;
  if (!write_all(u.fd, p.data.ptr, n)) {
    std::string why = "cannot write " + u.part + ": " + errno_text();
    drop(it);
    return answer(p.sha256, false, 0, why);
  }
  u.hash.update(p.data.ptr, n);
  u.next += n;
  if (u.next < u.total)
    return answer(p.sha256, false, u.next, "");
  std::string why = finish(u);
  drop(it);  // the part is renamed away (or to be removed)
  if (!why.empty())
    return answer(p.sha256, false, 0, why);
  return answer(p.sha256, true, p.total, "");
}

input_store::whole_result input_store::put_whole(const std::string& sha, std::string_view body) {
  if (!is_sha256_hex(sha))
    return {400, "the input's name must be its SHA-256: 64 lowercase hex digits"};
  if (body.size() > max_bytes_)
    return {413, fmt::format("the image is {} bytes, over the limit of {} bytes", body.size(),
                             max_bytes_)};
  if (body.empty())
    return {400, "the body is empty: a reference image is not"};
  const std::string got = to_hex(sha256_of(body));
  if (got != sha)
    return {400, "the body hashes to " + got + ", not " + sha + " (nothing kept)"};
  if (auto have = size_of(sha); have && *have == body.size())
    return {200, ""};
  msg::input_put p;
  p.sha256 = sha;
  p.total = body.size();
  p.data = msgpack::type::raw_ref(body.data(), static_cast<uint32_t>(body.size()));
  auto r = put("http", p);
  if (!r.done)
    return {500, r.error.empty() ? "the input was not stored" : r.error};
  return {201, ""};
}

} // namespace vidline::nodes::data
