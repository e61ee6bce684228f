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

namespace vidline::msg {
struct drain_request;
struct drain_reply;
} // namespace vidline::msg
#include "nodes/verbs/client.hpp"

namespace vidline::nodes {

/// Where the last config used by `run`/`demo` is remembered, so `wait` and `status` need
/// no --config: $VIDLINE_STATE_DIR, else $XDG_STATE_HOME/vidline, else ~/.local/state/vidline.
std::string state_dir();
void remember_config(const std::string& config_path);
/// The config given, or the remembered one; throws config_error when there is neither.
config::cluster cluster_for(const std::string& config_path);

/// A request to the coordinator that did not succeed: what to print, and the exit code
/// (nodes/exit_codes.hpp) it means: unreachable, no_such_run, refused, too_large.
class coordinator_error : public std::runtime_error {
public:
  coordinator_error(int exit_code, const std::string& what)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

private:
  int exit_code_;
};

/// Talks to the coordinator of a cluster over its bus endpoint.
class coordinator_client {
public:
  explicit coordinator_client(const config::cluster& c);

  /// Submits a run; the run id, or throws coordinator_error with the coordinator's reason
  /// (refused) or "no answer" (unreachable). Throws coordinator_error (usage) up front for
  /// a prompt that cannot fit a frame of max_frame_bytes.
  std::string submit(const msg::submit_run& req, int timeout_ms = 10000);

  /// A run's status JSON ("" = the latest run); nullopt when the coordinator does not answer
  /// within `timeout_ms`; throws coordinator_error with the coordinator's error otherwise
  /// (no_such_run, too_large, refused).
  /// The whole status, read in pages of `page_jobs()` jobs (each page is the coordinator's
  /// view at its own moment; a run of any size is read whole this way).
  std::optional<nlohmann::json> status(const std::string& run_id, int timeout_ms = 5000);

  /// One page: the jobs from index `offset`, at most `limit` (0 = all the rest), with the
  /// run's `page`, `states` and `summary`; same answers and errors as status().
  std::optional<nlohmann::json> status_page(const std::string& run_id, uint32_t offset,
                                            uint32_t limit, int timeout_ms = 5000);

  /// Jobs per page: as many as surely fit max_frame_bytes.
  uint32_t page_jobs() const;

  /// Asks the coordinator to finish a run's failed jobs; throws coordinator_error with the
  /// coordinator's reason (no_such_run, refused) or "no answer" (unreachable).
  msg::resume_reply resume(const std::string& run_id, int timeout_ms = 10000);

  /// The queue (nodes/verbs/queue_verbs.cpp): the runs' list JSON; cancel a run or one job; add
  /// jobs to an open run. Each throws coordinator_error as resume does.
  nlohmann::json runs(bool all, int timeout_ms = 5000);
  msg::cancel_reply cancel(const msg::cancel_run& req, int timeout_ms = 10000);
  msg::submit_jobs_reply submit_jobs(const msg::submit_jobs& req, int timeout_ms = 10000);
  /// `vidline drain` / `undrain` (nodes/verbs/gpu_verbs.cpp); throws as cancel does.
  msg::drain_reply drain(const msg::drain_request& req, int timeout_ms = 10000);

  /// Uploads the reference image at `path` (contents of SHA-256 `sha256`) to the
  /// coordinator's node (nodes/inputs.hpp): "" when it holds it (`already`: it did
  /// before), else why not. `unreachable` is set when the node did not answer.
  std::string upload_input(const std::string& path, const std::string& sha256,
                           bool* already = nullptr, bool* unreachable = nullptr);

  const std::string& endpoint() const { return endpoint_; }

private:
  std::string endpoint_;
  config::knobs knobs_;
  client_security security_;
};

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
planner::gantt_chart run_gantt(const nlohmann::json& status);

/// `vidline demo`: two nodes on loopback as the reference hosts, the reference 6-job batch.
int run_demo(bool json, const std::string& self_exe);

/// The CLI's exit code for an error reply's `code` (no_such_run, too_large, else refused).
int exit_code_of_reply(const std::string& code);

} // namespace vidline::nodes
