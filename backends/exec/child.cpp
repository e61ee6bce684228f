#include "backends/exec/child.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace vidline::backends::exec {
namespace {

using clock = std::chrono::steady_clock;

/// How long one look at the child may block before the cancel flag is read again.
constexpr auto slice = std::chrono::milliseconds(20);

/// A pidfd for `pid` (readable once it exits), or -1 where the kernel has none.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

/// Whether the child has exited, without reaping it (so its pid stays reserved).
bool has_exited(pid_t pid) {
  siginfo_t info{};
  int rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
  return rc == 0 && info.si_pid == pid;
}

/// Waits up to `d` for the child to exit (pidfd when there is one, else a short sleep).
bool wait_exit(pid_t pid, int pidfd, clock::duration d) {
  if (has_exited(pid))
    return true;
  if (d <= clock::duration::zero())
    return false;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::max<long long>(1, ms)));
  } else {
    std::this_thread::sleep_for(std::min<clock::duration>(d, std::chrono::milliseconds(5)));
  }
  return has_exited(pid);
}

/// Opens a file for the child's stdout/stderr in the file actions.
void add_output(posix_spawn_file_actions_t* fa, int fd, const std::string& path, bool append) {
  const char* p = path.empty() ? "/dev/null" : path.c_str();
  posix_spawn_file_actions_addopen(fa, fd, p, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
}

/// Members of process group `pgid` other than `except` that are not zombies.
int live_members(pid_t pgid, pid_t except) {
  DIR* d = ::opendir("/proc");
  if (d == nullptr)
    return 0;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == except)
      continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    char buf[512];
    ssize_t len = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (len <= 0)
      continue;
    buf[len] = '\0';
    // "pid (comm) state ppid pgrp ...": comm may hold anything, so parse after the last ')'.
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (close == nullptr || std::sscanf(close + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3)
      continue;
    if (pgrp == pgid && state != 'Z' && state != 'X')
      ++n;
  }
  ::closedir(d);
  return n;
}

/// Stops the whole group: SIGTERM, up to `grace` for the leader to exit, then SIGKILL.
void stop_group(pid_t pid, int pidfd, clock::duration grace) {
  ::kill(-pid, SIGTERM);
  auto deadline = clock::now() + grace;
  while (!has_exited(pid) && clock::now() < deadline)
    wait_exit(pid, pidfd, std::min<clock::duration>(deadline - clock::now(), slice));
  ::kill(-pid, SIGKILL);
}

} // namespace

std::vector<std::string> current_environment(const std::vector<std::string>& drop) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view v(*e);
    auto eq = v.find('=');
    std::string_view name = v.substr(0, eq);
    bool dropped = false;
    for (auto& d : drop)
      if (name == d)
        dropped = true;
    if (!dropped)
      out.emplace_back(v);
  }
  return out;
}

bool group_alive(pid_t pgid) { return live_members(pgid, 0) > 0; }

pid_t spawn_child(const child_spec& spec, std::string& error) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    error = "empty argv";
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  add_output(&fa, 1, spec.stdout_path, spec.append);
  if (!spec.stderr_path.empty() && spec.stderr_path == spec.stdout_path)
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  else
    add_output(&fa, 2, spec.stderr_path, spec.append);
  if (!spec.cwd.empty())
    posix_spawn_file_actions_addchdir_np(&fa, spec.cwd.c_str());
  // The node's own descriptors (sockets, the journal) are none of the child's business.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A group of its own (so one kill reaches every descendant that stays in it), an empty
  // signal mask and default dispositions (the node blocks SIGTERM and ignores SIGPIPE).
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                       POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv, envp;
  for (auto& a : spec.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : spec.env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = 0;
  // posix_spawnp looks argv[0] up in the caller's PATH (glibc), not the child's.
  int rc = posix_spawnp(&pid, spec.argv[0].c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error = "cannot start " + spec.argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  // Set the group from here too, so a kill right after the spawn cannot miss it.
  ::setpgid(pid, pid);
  return pid;
}

bool reap_child(pid_t pid, int& status) {
  if (!has_exited(pid))
    return false;
  if (live_members(pid, pid) > 0)
    ::kill(-pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

int stop_child(pid_t pid, std::chrono::steady_clock::duration grace) {
  int pidfd = open_pidfd(pid);
  stop_group(pid, pidfd, grace);
  while (!has_exited(pid))
    wait_exit(pid, pidfd, slice);
  if (pidfd >= 0)
    ::close(pidfd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

child_end run_child(const child_spec& spec, const child_limits& limits) {
  child_end end;
  auto start = clock::now();
  pid_t pid = spawn_child(spec, end.error);
  if (pid < 0)
    return end;
  int pidfd = open_pidfd(pid);

  std::optional<child_end::kind> stopped;
  auto deadline = limits.timeout > clock::duration::zero() ? start + limits.timeout
                                                           : clock::time_point::max();
  for (;;) {
    if (limits.cancel != nullptr && limits.cancel->load(std::memory_order_acquire)) {
      stopped = child_end::kind::cancelled;
      break;
    }
    auto now = clock::now();
    if (now >= deadline) {
      stopped = child_end::kind::timed_out;
      break;
    }
    if (wait_exit(pid, pidfd, std::min<clock::duration>(deadline - now, slice)))
      break;
  }
  if (stopped)
    stop_group(pid, pidfd, limits.grace);

  // The leader has exited (or is being SIGKILLed) and is not reaped: its group id is still
  // ours, so anything left in the group can be killed without hitting a stranger.
  while (!has_exited(pid))
    wait_exit(pid, pidfd, slice);
  if (live_members(pid, pid) > 0) {
    end.leftovers_killed = !stopped;
    ::kill(-pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pidfd >= 0)
    ::close(pidfd);
  end.elapsed_s = std::chrono::duration<double>(clock::now() - start).count();
  if (stopped) {
    end.how = *stopped;
  } else if (WIFEXITED(status)) {
    end.how = child_end::kind::exited;
    end.exit_code = WEXITSTATUS(status);
  } else {
    end.how = child_end::kind::signaled;
    end.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  return end;
}

} // namespace vidline::backends::exec
