#pragma once
/// A node's claim on its data directory: `<data_dir>/run/node.lock`, an fcntl (POSIX
/// record) write lock the node takes with F_SETLK when it starts and holds for its whole
/// life. The kernel drops it when the process ends, however it ends, so the lock cannot
/// go stale the way a pid file can: `vidline start` and `vidline stop` learn the live
/// node of a data directory by asking the kernel who holds it (F_GETLK), whatever config
/// path either was given, and a second node on the same data directory is refused.
///
/// The file holds, for people and for `--json`, one `key value` line each: `pid`, `token`
/// (random, new at every start: two lives of one pid differ), `host`, `config_digest` and
/// `config` (the path the node was given). Only the lock's holder (F_GETLK) is authority;
/// the text may lag a node that has just taken the lock.
///
/// POSIX record locks belong to a process and are released when it closes *any*
/// descriptor of the file: the holder must not open the file a second time (so
/// node_lock_holder is for other processes, such as `start` and `stop`).

#include <optional>
#include <stdexcept>
#include <string>

#include <sys/types.h>

namespace vidline::nodes::state {

/// `<data_dir>/run/node.lock`.
std::string node_lock_path(const std::string& data_dir);

/// What a node wrote into its lock file.
struct node_lock_info {
  pid_t pid = 0;            ///< the live holder, from F_GETLK (not the text)
  std::string token;        ///< "" when the text is not (yet) written or is another life's
  std::string host;
  std::string config_digest;
  std::string config;
};

/// Thrown by node_lock when another live process holds the lock.
class node_lock_busy : public std::runtime_error {
public:
  node_lock_busy(const std::string& what, node_lock_info holder)
      : std::runtime_error(what), holder_(std::move(holder)) {}
  const node_lock_info& holder() const { return holder_; }

private:
  node_lock_info holder_;
};

/// The lock, held from construction to destruction (or the end of the process).
class node_lock {
public:
  /// Takes the lock of `data_dir` (creating `run/`), then writes this process's pid, a
  /// fresh token and `host`, `config_digest`, `config`. Throws node_lock_busy naming the
  /// holder's pid when another process holds it, std::runtime_error on I/O errors.
  node_lock(const std::string& data_dir, const std::string& host,
            const std::string& config_digest, const std::string& config);
  ~node_lock();
  node_lock(const node_lock&) = delete;
  node_lock& operator=(const node_lock&) = delete;

  const std::string& token() const { return token_; }
  const std::string& path() const { return path_; }

private:
  int fd_ = -1;
  std::string path_;
  std::string token_;
};

/// The live holder of `data_dir`'s node lock, or nullopt when no process holds it (also
/// when the file does not exist). Its text fields are filled when the text names the
/// holder's pid (waiting up to `settle_s` for a node that has just taken the lock to write
/// it). Must not be called by the holder itself (it would drop its own lock). Throws
/// std::runtime_error when the file exists but cannot be opened or queried.
std::optional<node_lock_info> node_lock_holder(const std::string& data_dir,
                                               double settle_s = 1.0);

} // namespace vidline::nodes::state
