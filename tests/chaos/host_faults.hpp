#pragma once
// Faults of the machine around the nodes, for the chaos campaign (root only):
// - a link cut: nftables rules dropping every packet to or from the nodes' bus ports on
//   loopback, in a table of the test's own (removed when the cut ends or the test does);
// - a full disk: each host's data directory is a small tmpfs of the test's own; filling it
//   leaves no free byte until the filler is removed.

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <vector>

namespace chaos {

/// Runs a shell-free command line (argv), returning its exit status.
inline int run_argv(std::vector<std::string> args) {
  std::string cmd;
  for (auto& a : args)
    cmd += "'" + a + "' ";
  cmd += ">/dev/null 2>&1";
  return std::system(cmd.c_str());
}

/// Cuts and restores all traffic to and from some loopback TCP ports.
class link_cutter {
public:
  link_cutter(std::string table, std::vector<int> ports)
      : table_(std::move(table)), ports_(std::move(ports)) {}
  ~link_cutter() { restore(); }

  bool cut() {
    if (cut_)
      return true;
    if (run_argv({"nft", "add", "table", "inet", table_}) != 0)
      return false;
    run_argv({"nft", "add", "chain", "inet", table_, "input",
              "{ type filter hook input priority 0 ; }"});
    for (int p : ports_) {
      run_argv({"nft", "add", "rule", "inet", table_, "input", "tcp", "dport",
                std::to_string(p), "drop"});
      run_argv({"nft", "add", "rule", "inet", table_, "input", "tcp", "sport",
                std::to_string(p), "drop"});
    }
    cut_ = true;
    return true;
  }
  void restore() {
    if (cut_)
      run_argv({"nft", "delete", "table", "inet", table_});
    cut_ = false;
  }
  static bool available() {
    return ::geteuid() == 0 && run_argv({"nft", "list", "tables"}) == 0;
  }

private:
  std::string table_;
  std::vector<int> ports_;
  bool cut_ = false;
};

/// A data directory on a tmpfs of its own that can be filled up and emptied again.
class small_disk {
public:
  small_disk(std::string dir, const char* size) : dir_(std::move(dir)) {
    ::mkdir(dir_.c_str(), 0755);
    std::string opts = std::string("size=") + size;
    mounted_ = ::geteuid() == 0 && ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  }
  ~small_disk() {
    empty();
    if (mounted_)
      ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

  /// Takes every free byte.
  bool fill() {
    if (!mounted_ || filled_)
      return filled_;
    struct statvfs fs {};
    if (::statvfs(dir_.c_str(), &fs) != 0)
      return false;
    off_t free_bytes = static_cast<off_t>(fs.f_bavail) * static_cast<off_t>(fs.f_frsize);
    int fd = ::open((dir_ + "/.filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
      return false;
    // Allocate all, then whatever little is left.
    ::posix_fallocate(fd, 0, free_bytes);
    ::close(fd);
    filled_ = true;
    return true;
  }
  void empty() {
    if (filled_)
      ::unlink((dir_ + "/.filler").c_str());
    filled_ = false;
  }

private:
  std::string dir_;
  bool mounted_ = false;
  bool filled_ = false;
};

} // namespace chaos
