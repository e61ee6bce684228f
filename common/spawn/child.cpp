#include "common/spawn/child.hpp"
#include "common/spawn/pid_records.hpp"

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
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace vidline::spawn {
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

namespace {

/// argv[0] resolved as posix_spawnp would (in the caller's PATH when it has no '/').
std::string resolve_program(const std::string& name, std::string& error) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), F_OK) != 0) {
      error = "cannot start " + name + ": " + std::strerror(errno);
      return "";
    }
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  int first_errno = ENOENT;
  std::size_t at = 0;
  for (;;) {
    auto colon = dirs.find(':', at);
    std::string dir = dirs.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (errno == EACCES && ::access(candidate.c_str(), F_OK) == 0)
      first_errno = EACCES;
    if (colon == std::string::npos)
      break;
    at = colon + 1;
  }
  error = "cannot start " + name + ": " + std::strerror(first_errno);
  return "";
}

/// Opens `path` (or /dev/null) as descriptor `fd` in a forked child; async-signal-safe.
bool child_open(int fd, const char* path, int flags) {
  int got = ::open(path, flags | O_CLOEXEC, 0644);
  if (got < 0)
    return false;
  if (got != fd) {
    if (::dup2(got, fd) < 0)
      return false;
    ::close(got);
  } else {
    ::fcntl(fd, F_SETFD, 0);
  }
  return true;
}

/// Everything a forked child needs, prepared before the fork (the child must not allocate).
struct prepared {
  std::string program;
  std::vector<char*> argv, envp;
  const char* out = nullptr;
  const char* err = nullptr;
  bool err_is_out = false;
  int out_flags = 0;
  const char* cwd = nullptr;
  std::vector<int> pass_fds;
  int in_fd = -1, out_fd = -1;
  bool new_session = false;
};

/// The child's side of a fork: its own group, a parent-death signal, clean signals, its
/// descriptors, then exec. Only async-signal-safe calls; errno goes up `report` on failure.
[[noreturn]] void become_child(const prepared& p, pid_t parent, int report) {
  auto fail = [&](int e) {
    ssize_t w = ::write(report, &e, sizeof e);
    (void)w;
    ::_exit(127);
  };
  if (p.new_session) {
    if (::setsid() < 0)
      fail(errno);
  } else {
    ::setpgid(0, 0);
    // SIGKILL when the thread that forked us ends: that is the spawner thread, which lives
    // as long as the node, so this fires when the node dies, however it dies.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
      fail(errno);
    if (::getppid() != parent)  // the node died between the fork and the prctl
      ::_exit(128 + SIGKILL);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    ::sigaction(sig, &dfl, nullptr);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  // Passed descriptors first to high numbers, so moving them to 3, 4, ... cannot clobber one.
  int high[16];
  std::size_t n = std::min<std::size_t>(p.pass_fds.size(), 16);
  for (std::size_t i = 0; i < n; ++i)
    if ((high[i] = ::fcntl(p.pass_fds[i], F_DUPFD_CLOEXEC, 64)) < 0)
      fail(errno);
  const int in = p.in_fd >= 0 ? ::fcntl(p.in_fd, F_DUPFD_CLOEXEC, 64) : -1;
  const int out = p.out_fd >= 0 ? ::fcntl(p.out_fd, F_DUPFD_CLOEXEC, 64) : -1;
  if ((p.in_fd >= 0 && in < 0) || (p.out_fd >= 0 && out < 0))
    fail(errno);
  if (in >= 0 ? ::dup2(in, 0) < 0 : !child_open(0, "/dev/null", O_RDONLY))
    fail(errno);
  if (out >= 0 ? ::dup2(out, 1) < 0 : !child_open(1, p.out, p.out_flags))
    fail(errno);
  if (p.err_is_out ? ::dup2(1, 2) < 0 : !child_open(2, p.err, p.out_flags))
    fail(errno);
  for (std::size_t i = 0; i < n; ++i)
    if (::dup2(high[i], 3 + static_cast<int>(i)) < 0)
      fail(errno);
  // The node's own descriptors (sockets, the journal) are none of the child's business.
  // The report pipe stays open (it is close-on-exec) and sits at 64 or above.
  unsigned lo = 3 + static_cast<unsigned>(n), r = static_cast<unsigned>(report);
  if (::syscall(SYS_close_range, lo, r - 1, 0) != 0 ||
      ::syscall(SYS_close_range, r + 1, ~0U, 0) != 0)
    for (int fd = static_cast<int>(lo); fd < 4096; ++fd)  // kernels before 5.9
      if (fd != report)
        ::close(fd);
  if (p.cwd != nullptr && ::chdir(p.cwd) != 0)
    fail(errno);
  ::execve(p.program.c_str(), p.argv.data(), p.envp.data());
  fail(errno);
  ::_exit(127);
}

/// The one thread that forks every child. A parent-death signal fires when the *thread*
/// that forked dies; stage calls run on short-lived threads, so they hand their forks to
/// this one, which lives as long as the process.
class spawner {
public:
  static spawner& instance() {
    // Never destroyed: it must outlive every caller. A process forked from this one (a
    // test's fake node) has the object but not its thread, so it gets one of its own.
    static std::mutex m;
    static spawner* s = nullptr;
    static pid_t owner = 0;
    std::lock_guard<std::mutex> l(m);
    if (s == nullptr || owner != ::getpid()) {
      s = new spawner();
      owner = ::getpid();
    }
    return *s;
  }

  /// Runs `fork_fn` on the spawner thread and returns its result.
  pid_t run(const std::function<pid_t()>& fork_fn) {
    std::packaged_task<pid_t()> task(fork_fn);
    auto result = task.get_future();
    {
      std::lock_guard<std::mutex> l(m_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return result.get();
  }

private:
  spawner() {
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    for (;;) {
      std::packaged_task<pid_t()> task;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<pid_t()>> queue_;
};

} // namespace

pid_t spawn_child(const child_spec& spec, std::string& error) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    error = "empty argv";
    return -1;
  }
  if (spec.pass_fds.size() > 16) {
    error = "more than 16 descriptors to pass";
    return -1;
  }
  prepared p;
  p.program = resolve_program(spec.argv[0], error);
  if (p.program.empty())
    return -1;
  for (auto& a : spec.argv)
    p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (auto& e : spec.env)
    p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  p.out = spec.stdout_path.empty() ? "/dev/null" : spec.stdout_path.c_str();
  p.err_is_out = !spec.stderr_path.empty() && spec.stderr_path == spec.stdout_path;
  p.err = spec.stderr_path.empty() ? "/dev/null" : spec.stderr_path.c_str();
  p.out_flags = O_WRONLY | O_CREAT | (spec.append ? O_APPEND : O_TRUNC);
  p.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  p.pass_fds = spec.pass_fds;
  p.in_fd = spec.stdin_fd;
  p.out_fd = spec.stdout_fd;
  p.new_session = spec.new_session;

  int child_errno = 0;
  pid_t pid = spawner::instance().run([&]() -> pid_t {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      child_errno = errno;
      return -1;
    }
    // The report pipe's write end must sit above the descriptors the child rearranges.
    int report = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 64);
    ::close(fds[1]);
    if (report < 0) {
      child_errno = errno;
      ::close(fds[0]);
      return -1;
    }
    pid_t parent = ::getpid();
    pid_t child = ::fork();
    if (child == 0)
      become_child(p, parent, report);
    ::close(report);
    if (child < 0) {
      child_errno = errno;
      ::close(fds[0]);
      return -1;
    }
    // Set the group from here too, so a kill right after the spawn cannot miss it (not
    // for a new session: a group leader could no longer call setsid).
    if (!p.new_session)
      ::setpgid(child, child);
    int e = 0;
    ssize_t got;
    while ((got = ::read(fds[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    ::close(fds[0]);
    if (got == sizeof e) {  // exec failed: the child has exited 127
      child_errno = e;
      int status = 0;
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    record_child(child);
    return child;
  });
  if (pid < 0) {
    error = "cannot start " + spec.argv[0] + ": " + std::strerror(child_errno);
    return -1;
  }
  return pid;
}

bool reap_child(pid_t pid, int& status) {
  if (!has_exited(pid))
    return false;
  if (live_members(pid, pid) > 0)
    ::kill(-pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  forget_child(pid);
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
  forget_child(pid);
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
  forget_child(pid);
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

} // namespace vidline::spawn
