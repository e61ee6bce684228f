#pragma once
/// The verbs of the `vidline` command line that talk to a running cluster.

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/planner/gantt.hpp"
#include "config/config.hpp"
#include "messages/messages.hpp"

#include "nodes/verbs/client.hpp"
#include "nodes/verbs/coordinator_client.hpp"

namespace vidline::nodes::verbs {

/// Where the last config used by `run`/`demo` is remembered, so `wait` and `status` need
/// no --config: $VIDLINE_STATE_DIR, else $XDG_STATE_HOME/vidline, else ~/.local/state/vidline.
std::string state_dir();
void remember_config(const std::string& config_path);
/// The config given, or the remembered one; throws config_error when there is neither.
config::cluster cluster_for(const std::string& config_path);

/// Runs above this many jobs get no ETA in `wait` (planning them would hold the wait up).
inline constexpr std::size_t wait_plan_max_jobs = 20000;

/// Runs above this many jobs are followed by `wait` from their state counts alone (one small
/// status page per poll), with no line per job.
inline constexpr std::size_t wait_line_max_jobs = 5000;

/// Options of `wait`.
struct wait_options {
  double timeout_s = 0;        ///< 0 = forever
  bool json = false;           ///< print the final status JSON instead of the table
  bool quiet = false;          ///< no per-job lines, no progress
  const char* reference_row = nullptr;  ///< printed beside the summary (demo)
  /// The cluster, to plan the batch for the progress line's ETA (none = no ETA).
  const config::cluster* cluster = nullptr;
  /// Called with each status polled (all the jobs, or one page of a big run), before the
  /// end is judged: `--collect` copies the videos finished since (nodes/verbs/collect.hpp).
  std::function<void(const nlohmann::json&)> on_status;
};

/// Follows a run: a line per job as it finishes, a progress line (done / total, jobs per
/// state, the ETA by the plan) rewritten in place on a terminal and printed again only when
/// it changes elsewhere, then the summary. Exit codes (nodes/exit_codes.hpp): ok, job_failed,
/// timeout, unreachable (no answer for 30 s, or none before --timeout), no_such_run,
/// too_large, refused.
int wait_for_run(coordinator_client& client, const std::string& run_id,
                 const wait_options& opts);

/// A duration for people: "42 s", "17 min", "3.5 h" (negative as 0).
std::string duration_text(double seconds);

/// The progress line of `wait`: "run ID: D/T done (S succeeded, F failed); per-state counts;
/// ETA by the plan" (`planned`: when each job would finish, ascending; empty = no ETA).
std::string progress_line(const nlohmann::json& status, const std::vector<double>& planned);

/// When each job of a run would finish by the plan (run-clock seconds from submission,
/// ascending), from its status JSON; empty when it cannot be planned or has more than
/// wait_plan_max_jobs jobs. What `wait`'s ETA and the HTTP API's `plan` event use.
std::vector<double> planned_finish_times(const config::cluster& c, const nlohmann::json& status);

/// Human-readable status of a run (the table `vidline status` prints).
std::string format_status(const nlohmann::json& status);

/// A run's Gantt chart from its status JSON (`vidline status RUN_ID --gantt`): a lane per
/// pool and per decoder that ran a stage, in the order they first started one, and a bar per
/// stage the jobs finished (the status's per-job `stages`). Throws nlohmann::json::exception
/// on a status without them.
actors::planner::gantt_chart run_gantt(const nlohmann::json& status);

/// `vidline demo`: two nodes on loopback as the reference hosts, the reference 6-job batch.
int run_demo(bool json, const std::string& self_exe);

} // namespace vidline::nodes::verbs
