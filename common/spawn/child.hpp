#pragma once
/// One child process run to its end: spawned without a shell from an argv, in a process
/// group of its own, with its output in files, stopped by a deadline or a cancel flag.
/// Whatever the end, nothing of its process group is left running afterwards.
///
/// The project's one spawner: stage programs, backend processes, the nodes that `vidline
/// start` and `vidline demo` launch, the benchmarks' and the tests' child processes all
/// start through spawn_child.
///
/// Every child is forked by one spawner thread that lives as long as the process, with
/// PR_SET_PDEATHSIG = SIGKILL: when the node dies, even by SIGKILL, its children die with
/// it (the signal fires on the death of the forking *thread*, hence the one long-lived
/// thread). Each live child has a pid record (pid_records.hpp) while the node records.
///
/// Failures it handles (and how):
/// - the program cannot be started (missing, not executable): `spawn_failed`, errno text;
/// - it runs past its deadline: SIGTERM to the whole group, `grace` later SIGKILL;
/// - the cancel flag is raised: the same, without waiting for the deadline;
/// - it exits but leaves children in its group: they are SIGKILLed before the leader is
///   reaped (while the leader is a zombie its pid, hence the group id, cannot be reused);
/// - the caller's thread blocks SIGTERM/SIGINT or ignores SIGPIPE (the node does): the
///   child starts with an empty signal mask and default dispositions.
/// - the node dies (any signal): the child gets SIGKILL (parent-death signal); what it
///   started itself (its own children) is ended by the node's next start, from the pid
///   records (reap_previous_life).
/// Not handled: a descendant that leaves the group (setsid/setpgid) escapes the kill.

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <sys/types.h>

namespace vidline::spawn {

/// What to run.
struct child_spec {
  std::vector<std::string> argv;      ///< argv[0] is a path or a name looked up in PATH
  std::vector<std::string> env;       ///< the whole environment, "NAME=value" each
  std::string cwd;                    ///< working directory; "" = the caller's
  std::string stdout_path;            ///< created/truncated; "" = /dev/null
  std::string stderr_path;            ///< created/truncated; "" = /dev/null
  bool append = false;                ///< append to the output files instead
  std::vector<int> pass_fds;          ///< become the child's descriptors 3, 4, ... (at most 16)
  int stdin_fd = -1;                  ///< >= 0: becomes its stdin (a pipe) instead of /dev/null
  int stdout_fd = -1;                 ///< >= 0: becomes its stdout instead of stdout_path
  /// A session of its own (setsid) instead of a process group, and no parent-death
  /// signal: for a node that a service command starts and that outlives it.
  bool new_session = false;
};

/// How long it may run and how it is stopped.
struct child_limits {
  std::chrono::steady_clock::duration timeout{0};   ///< 0 = none
  std::chrono::steady_clock::duration grace{std::chrono::seconds(3)};  ///< SIGTERM -> SIGKILL
  const std::atomic<bool>* cancel = nullptr;
};

/// How the child ended.
struct child_end {
  enum class kind { exited, signaled, timed_out, cancelled, spawn_failed };
  kind how = kind::spawn_failed;
  int exit_code = -1;                 ///< exited: its code
  int signal = 0;                     ///< signaled (not by us): the signal
  bool leftovers_killed = false;      ///< it left processes in its group; they were killed
  double elapsed_s = 0;               ///< real seconds from spawn to reaping
  std::string error;                  ///< spawn_failed: why
};

/// Runs `spec` to its end under `limits`. Blocks; never throws for the child's sake.
child_end run_child(const child_spec& spec, const child_limits& limits);

/// Starts `spec` in a process group of its own, without waiting. Returns its pid, or -1
/// with `error` set.
pid_t spawn_child(const child_spec& spec, std::string& error);

/// Whether the child has exited; if so, kills what it left in its group, reaps it, and
/// sets `status` (a waitpid status). Never blocks.
bool reap_child(pid_t pid, int& status);

/// Stops a running child's whole group (SIGTERM, up to `grace` for the leader, SIGKILL)
/// and reaps it. Returns its waitpid status.
int stop_child(pid_t pid, std::chrono::steady_clock::duration grace);

/// The caller's environment as "NAME=value" strings, without the names in `drop`.
std::vector<std::string> current_environment(const std::vector<std::string>& drop = {});

/// Whether a process group still has a member (zombies count as gone).
bool group_alive(pid_t pgid);

} // namespace vidline::spawn
