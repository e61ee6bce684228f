/// CURVE key pairs and key files (nodes/bus/keys.hpp): made, written where only their owner
/// can read the secret half, read back and checked.

#include "nodes/bus/keys.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "common/files.hpp"

namespace vidline::nodes::bus {
namespace {

constexpr std::size_t z85_key_chars = 40;
/// A key file is one key and a newline; anything much longer is not one.
constexpr std::size_t max_key_file_bytes = 128;

std::string errno_text() { return std::strerror(errno); }

/// Writes `text` to `path` through a temporary file created with `mode` (fchmod'ed, so
/// the umask cannot widen or narrow it), fsynced and renamed into place.
void write_key_file(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // a leftover of an interrupted run; O_EXCL below insists
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0)
    throw std::runtime_error("cannot create " + tmp + ": " + errno_text());
  bool ok = ::fchmod(fd, mode) == 0;
  std::size_t done = 0;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    ok = n > 0;
    if (ok)
      done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    errno = saved;
    throw std::runtime_error("cannot write " + tmp + ": " + errno_text());
  }
  files::rename_durable(tmp, path);
}

/// The single key a key file holds; `path` names the file in errors.
std::string parse_key_file(const std::string& text, const std::string& path) {
  std::string key = text;
  if (!key.empty() && key.back() == '\n')
    key.pop_back();
  if (!is_z85_key(key))
    throw std::runtime_error(path + ": not a CURVE key file (one Z85 key of 40 characters "
                                    "expected)");
  return key;
}

/// Closes a file descriptor when it goes out of scope.
struct fd_closer {
  int fd;
  ~fd_closer() { ::close(fd); }
};

/// Reads a small file without following a symlink at its last component.
std::string read_key_file(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("cannot open " + path + ": " + errno_text());
  const fd_closer closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw std::runtime_error(path + ": not a regular file");
  std::string text;
  char buf[max_key_file_bytes + 1];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw std::runtime_error("cannot read " + path + ": " + errno_text());
    if (n == 0)
      return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_key_file_bytes)
      throw std::runtime_error(path + ": too large for a key file");
  }
}

} // namespace

curve_keypair make_curve_keypair() {
  char pub[z85_key_chars + 1] = {};
  char sec[z85_key_chars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()) +
                             " (libzmq without CURVE?)");
  curve_keypair k{pub, sec};
  // Wipe the stack copy; the string is the caller's to keep.
  std::memset(sec, 0, sizeof sec);
  return k;
}

bool is_z85_key(const std::string& s) {
  static const std::string alphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  if (s.size() != z85_key_chars)
    return false;
  for (char c : s)
    if (alphabet.find(c) == std::string::npos)
      return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, s.c_str()) != nullptr;
}

keygen_result write_curve_keypair(const std::string& dir, const std::string& host,
                                  bool overwrite) {
  namespace fs = std::filesystem;
  // Host names follow the config's rule, which also keeps the files inside `dir`.
  if (!files::is_safe_name(host, 64))
    throw std::invalid_argument("host name '" + host + "' must be 1-64 characters of A-Z a-z "
                                "0-9 _ . - not starting with '.' or '-'");
  if (dir.empty())
    throw std::invalid_argument("no output directory given");
  keygen_result r;
  r.secret_path = (fs::path(dir) / (host + ".key")).string();
  r.public_path = (fs::path(dir) / (host + ".pub")).string();
  std::error_code ec;
  if (!overwrite)
    for (const auto& p : {r.secret_path, r.public_path})
      if (fs::symlink_status(p, ec).type() != fs::file_type::not_found)
        throw std::invalid_argument(p + " exists: a new key pair revokes the old one; "
                                        "pass --force to replace it");
  if (!fs::exists(dir, ec)) {
    files::make_dirs(dir);
    fs::permissions(dir, fs::perms::owner_all, ec);  // the secret's directory: owner only
  }
  const curve_keypair k = make_curve_keypair();
  write_key_file(r.secret_path, k.secret_z85 + "\n", 0600);
  write_key_file(r.public_path, k.public_z85 + "\n", 0644);
  r.public_z85 = k.public_z85;
  return r;
}

std::string read_public_key(const std::string& path) {
  struct stat st {};
  return parse_key_file(read_key_file(path, st), path);
}

std::string read_secret_key(const std::string& path) {
  struct stat st {};
  const std::string text = read_key_file(path, st);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw std::runtime_error(path + ": mode " + mode + " lets others read or change the "
                                    "secret key; chmod 600 it");
  }
  return parse_key_file(text, path);
}

std::string public_of_secret(const std::string& secret_z85) {
  char pub[41];
  if (!is_z85_key(secret_z85) || zmq_curve_public(pub, secret_z85.c_str()) != 0)
    throw std::runtime_error("not a Z85 CURVE secret key");
  return pub;
}

namespace {

/// The host's secret key from its file, checked against its public key in the config.
std::string host_secret(const config::host& h) {
  const std::string secret = read_secret_key(h.secret_key_file);
  if (public_of_secret(secret) != h.public_key)
    throw std::runtime_error(h.secret_key_file + " is not the secret half of host " + h.name +
                             "'s public_key in the config (" + h.public_key + ")");
  return secret;
}

} // namespace

bus_security bus_security_for(const config::cluster& c, const std::string& host) {
  bus_security s;
  s.plaintext = c.plaintext;
  if (c.plaintext)
    return s;
  const config::host* self = c.find_host(host);
  if (self == nullptr)
    throw std::runtime_error("no host named '" + host + "' in the config");
  s.secret_z85 = host_secret(*self);
  s.public_z85 = self->public_key;
  for (const auto& h : c.hosts)
    s.host_keys[h.name] = h.public_key;
  return s;
}

client_security client_security_for(const config::cluster& c, const std::string& node) {
  client_security s;
  s.plaintext = c.plaintext;
  if (c.plaintext)
    return s;
  const config::host* server = c.find_host(node);
  if (server == nullptr)
    throw std::runtime_error("no host named '" + node + "' in the config");
  s.server_public_z85 = server->public_key;
  std::vector<const config::host*> order{server};
  for (const auto& h : c.hosts)
    if (h.name != node)
      order.push_back(&h);
  std::string tried;
  for (const auto* h : order) {
    try {
      s.secret_z85 = host_secret(*h);
      s.public_z85 = h->public_key;
      return s;
    } catch (const std::exception& e) {
      tried += std::string("\n  ") + e.what();
    }
  }
  throw std::runtime_error("cannot authenticate to " + node + ": the command line uses the "
                           "key pair of a host of the config, and no host's secret key file "
                           "is readable here (run it as the nodes' user on a host of the "
                           "cluster):" + tried);
}

} // namespace vidline::nodes::bus
