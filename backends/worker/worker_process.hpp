#pragma once
/// One long-lived worker process (the user's program) that a pool, decoder or encoder owns,
/// and the calls that hand it stage requests over the worker protocol (protocol.hpp).
///
/// A thread supervises it, like a backend process (backends/process):
///
///   starting --hello--> ready <--> busy (one request at a time)
///      |                  | exits, fails a health check, is killed (see below)
///      v                  v
///   (restart budget left?) --yes, after a backoff (0.5 s doubling to 10 s)--> starting
///                          \--no--> gave_up
///   any --destructor--> shutdown message, stop_grace_s, SIGTERM to its group, SIGKILL
///
/// Failures it handles (and how):
/// - it never says hello within start_timeout_s, or says something else first: killed,
///   counted as an exit;
/// - it dies while idle: restarted (the next request waits for the successor);
/// - it dies mid-request (EOF on its socket): that call ends `died`, the caller makes it
///   a transient attempt, and the next request goes to the restarted successor;
/// - it does not answer a ping within health_timeout_s while idle: killed and restarted;
/// - a call is cancelled or runs past its timeout: a cancel message, then up to
///   cancel_grace_s for its result; a worker that ignores it is killed and restarted;
/// - it sends a line that is not the protocol: killed and restarted (the call ends
///   `protocol_error`, a fatal attempt: the program is broken);
/// - it crash-loops: more than max_restarts exits within restart_period_s and it gives up
///   (calls end `down` at once).
/// Its process comes from the one spawner (common/spawn/child.hpp): parent-death signal,
/// pid record.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

#include "backends/process/supervision.hpp"
#include "backends/worker/protocol.hpp"

namespace vidline::backends::worker {

/// What to run and how to supervise it (worker_options.hpp documents the values).
struct worker_spec : process::supervised_spec {
  worker_spec() {
    start_timeout_s = 600;            // a model load takes minutes
    restart_period_s = 300;
  }
  double cancel_grace_s = 5;
  double health_interval_s = 30;
  double health_timeout_s = 10;
};

/// How one call ended.
struct call_end {
  enum class kind { result, died, timed_out, cancelled, down, protocol_error };
  kind how = kind::down;
  worker_message result;              ///< kind::result
  std::string detail;                 ///< why, for the others
  double elapsed_s = 0;
};

/// How a load (a warm start) ended: `loaded`, or why not (`detail`). A worker that does
/// not take load requests, refuses one or answers something else is left running: only
/// the warm start is lost; one that dies is restarted as after any death.
struct load_end {
  bool loaded = false;
  worker_message reply;               ///< loaded: its model, identity and load_s
  std::string detail;
  double elapsed_s = 0;
};

class worker_process : private process::supervisor_thread {
public:
  enum class state { starting, ready, gave_up, stopped };

  /// Starts supervising (and so starts the process) at once.
  explicit worker_process(worker_spec spec);
  ~worker_process();
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  /// Sends `r` once the worker is ready and idle (waiting for it counts against the
  /// timeout), relays its progress to `progress`, and returns its result. Blocks.
  /// `checkpoint` takes each checkpoint the worker saves (a file inside r.checkpoint_dir;
  /// others are refused and logged); `preempt`, once set, is passed on to the worker once.
  call_end call(const request& r, double timeout_s, const std::atomic<bool>* cancel,
                const std::function<void(uint32_t step, uint32_t steps)>& progress,
                const std::function<bool(uint32_t step, uint32_t steps,
                                         const std::string& file)>& checkpoint = {},
                const std::atomic<bool>* preempt = nullptr);

  /// Sends `l` once the worker is ready and idle, if its hello said it takes load
  /// requests, and waits up to `timeout_s` for its loaded. Blocks; the worker is busy
  /// meanwhile, and a call waiting beside it goes after it, so a request waits for the
  /// load (and finds the model loaded).
  /// `cancel` (may be null) ends the wait early (the worker goes on loading).
  load_end load(const load_request& l, double timeout_s, const std::atomic<bool>* cancel);

  /// The model the running worker said it has loaded (key, identity), from its loaded and
  /// its results; empty while it said none, and after every restart.
  std::pair<std::string, std::string> loaded_model() const;

  state current() const;
  int restarts() const;               ///< starts after the first
  pid_t pid() const;                  ///< 0 when none runs
  std::vector<std::string> stages() const;  ///< what its hello said
  const worker_spec& spec() const { return spec_; }

private:
  struct instance;
  void supervise();

  worker_spec spec_;
  state state_ = state::starting;
  bool busy_ = false;                 ///< a call (or a health check) owns the socket
  int loads_waiting_ = 0;             ///< loads waiting for the worker: they go first
  bool kill_ = false;                 ///< a call asks the supervisor to end this instance
  std::string kill_why_;
  int restarts_ = 0;
  std::string last_exit_;
  std::shared_ptr<instance> current_;
  std::chrono::steady_clock::time_point last_used_;
};

} // namespace vidline::backends::worker
