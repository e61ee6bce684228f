#pragma once
/// What the two supervisors of long-lived backend processes share (backend_process.hpp: an
/// owned ComfyUI; backends/worker/worker_process.hpp: a worker): what a supervised process
/// is (`supervised_spec`) and how one start is spawned, the supervisor's thread with its
/// lock, wake-up and stop flag (`supervisor_thread`), how an exit is told, the cap of the
/// process's log, and what follows an exit (logged with the log's tail, counted against
/// the restart budget, then a backoff or giving up).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/spawn/child.hpp"
#include "common/restart_budget.hpp"

namespace vidline::backends::process {

using steady = std::chrono::steady_clock;

inline steady::duration seconds(double s) {
  return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
}

/// What both supervisors run and how they keep it (each spec adds its own: a ComfyUI's
/// directories and probe, a worker's health checks).
struct supervised_spec {
  std::string name;                   ///< for logs: "comfyui of pool four_a"
  std::vector<std::string> argv;
  std::vector<std::string> env;       ///< the whole environment
  std::string cwd;
  std::string log_path;               ///< stdout and stderr, appended
  uint64_t log_max_bytes = 10u << 20;  ///< the log rotates past this (knob log_file_bytes)
  int log_files = 5;                  ///< rotated logs kept beside it (knob log_files)
  double start_timeout_s = 300;
  int max_restarts = 5;               ///< more exits than this within restart_period_s: give up
  double restart_period_s = 30;
  double stop_grace_s = 10;           ///< SIGTERM -> SIGKILL
};

/// One start of `s` through the one spawner (spawn::spawn_child): its argv, env and cwd,
/// stdout and stderr appended to its log, `pass_fds` as its descriptors 3, 4, ...
/// The pid, or -1 with `error`.
pid_t spawn_supervised(const supervised_spec& s, std::string& error,
                       std::vector<int> pass_fds = {});

/// A supervisor's thread and what it shares with its owner: the lock `m_`, the wake-up
/// `cv_` and the stop flag `stop_`. The owner starts the loop in its constructor and calls
/// stop_supervising() first in its destructor (before its own members go).
class supervisor_thread {
protected:
  supervisor_thread() = default;
  ~supervisor_thread();
  supervisor_thread(const supervisor_thread&) = delete;
  supervisor_thread& operator=(const supervisor_thread&) = delete;

  void start_supervising(std::function<void()> loop);
  /// Sets the stop flag, wakes the loop and joins it. Idempotent.
  void stop_supervising();
  /// Sleeps up to `d` unless stopped (or `wake` turns true, checked under the lock); false
  /// when stopped.
  bool nap(steady::duration d, const std::function<bool()>& wake = {});

  mutable std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;

private:
  std::thread thread_;
};

/// "exit N", "killed by signal N" or "ended", for a waitpid status.
std::string describe_status(int status);

/// A supervised process's log, capped (files::cap_appended_log) at most every 2 s.
class log_cap {
public:
  log_cap(std::string name, std::string path, uint64_t max_bytes, int keep)
      : name_(std::move(name)), path_(std::move(path)), max_(max_bytes), keep_(keep) {}
  /// Called from the supervisor's loop.
  void check();

private:
  std::string name_, path_;
  uint64_t max_;
  int keep_;
  steady::time_point last_ = steady::now();
};

/// What follows an exit of a supervised process.
struct after_exit {
  bool give_up = false;  ///< more than its budget's restarts within the period
  double wait_s = 0;     ///< else: the backoff before the next start
};

/// Logs the exit (`how`, and the tail of `log_path`), counts it against `budget`, and gives
/// the backoff: 0.5, 1, 2, 4, 8, 10 s (`backoff` counts the exits since the last start that
/// came up; the caller sets it to 0 then), so a crash loop does not spin.
after_exit on_exit(const std::string& name, const std::string& log_path, bool started,
                   const std::string& how, restart_budget& budget, int& backoff);

/// The supervisor's bookkeeping after an exit (`ended`, `next` from on_exit), under its
/// lock `m`: it keeps the exit as `last_exit`, then either gives up (`state` gave_up, told on
/// `cv`, and waits until `stop`) or counts a restart and waits the backoff. False when the
/// supervisor's loop ends: it gave up, or `stop` came during the backoff.
template <class State>
bool settle_exit(std::mutex& m, std::condition_variable& cv, const bool& stop, State& state,
                 std::string& last_exit, int& restarts, const after_exit& next,
                 const std::string& ended) {
  {
    std::lock_guard<std::mutex> l(m);
    last_exit = ended;
    if (next.give_up)
      state = State::gave_up;
    else
      ++restarts;
  }
  cv.notify_all();
  std::unique_lock<std::mutex> l(m);
  if (next.give_up) {
    cv.wait(l, [&] { return stop; });
    return false;
  }
  return !cv.wait_for(l, seconds(next.wait_s), [&] { return stop; });
}

} // namespace vidline::backends::process
