#pragma once
/// A backend process a pool or decoder owns (a ComfyUI instance): started with its own
/// port, database, directories and short runtime directory, watched, restarted when it
/// dies under a restart-intensity budget (the knobs' policy: more than `max_restarts`
/// within `restart_period_s` and it gives up), stopped with its owner.
///
/// A thread supervises it:
///
///   starting --answers--> ready --exits--> (budget left?) --yes, after a backoff--> starting
///      |                                        \--no--> gave_up
///      \--exits or start_timeout_s--> the same as an exit from ready
///   any --stop (destructor)--> SIGTERM to its group, stop_grace_s, SIGKILL --> stopped

#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "backends/comfyui/client.hpp"
#include "backends/comfyui/comfyui_options.hpp"
#include "backends/process/supervision.hpp"

namespace vidline::backends::process {

/// What to run and how to tell it is up.
struct process_spec : supervised_spec {
  std::vector<std::string> dirs;      ///< created before each start
  std::function<bool()> answers;      ///< a probe: it is up
};

class backend_process : private supervisor_thread {
public:
  enum class state { starting, ready, gave_up, stopped };

  /// Starts supervising (and so starts the process) at once.
  explicit backend_process(process_spec spec);
  /// Stops the process and the supervisor.
  ~backend_process();
  backend_process(const backend_process&) = delete;
  backend_process& operator=(const backend_process&) = delete;

  /// Waits up to `timeout_s` for the process to answer. False, with `why`, when it gave up
  /// (its restart budget is spent) or is not up in time.
  bool wait_ready(double timeout_s, std::string* why);

  state current() const;
  int restarts() const;               ///< starts after the first
  pid_t pid() const;                  ///< 0 when none runs
  const process_spec& spec() const { return spec_; }

private:
  void supervise();

  process_spec spec_;
  state state_ = state::starting;
  int restarts_ = 0;
  pid_t pid_ = 0;
  std::string last_exit_;
};

/// Where a ComfyUI instance of an owner keeps its files, and the placeholders of its argv.
struct comfyui_layout {
  std::string base_dir, input_dir, output_dir, temp_dir, user_dir, database, runtime_dir;
};
comfyui_layout layout_of(const comfyui::process_options& p);

/// The spec of a ComfyUI instance for `owner`: argv and env templates expanded ({port}
/// from the backend's url, {devices}, the layout's directories), the owner's devices in
/// its environment by vendor, RAY_TMPDIR / RAYLIGHT_RAY_TMPDIR in its short runtime
/// directory, MASTER_PORT off its own port, and a probe of GET /system_stats.
process_spec comfyui_process_spec(const comfyui::process_options& p, const comfyui::endpoint& e,
                                  const std::string& owner, const std::string& vendor,
                                  const std::vector<std::string>& devices);

} // namespace vidline::backends::process
