#pragma once
/// The verbs of the `vidline` command line that talk to a running cluster.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/planner/gantt.hpp"
#include "config/config.hpp"
#include "messages/messages.hpp"
#include "nodes/client.hpp"

namespace vidline::nodes {

/// Where the last config used by `run`/`demo` is remembered, so `wait` and `status` need
/// no --config: $VIDLINE_STATE_DIR, else $XDG_STATE_HOME/vidline, else ~/.local/state/vidline.
std::string state_dir();
void remember_config(const std::string& config_path);
/// The config given, or the remembered one; throws config_error when there is neither.
config::cluster cluster_for(const std::string& config_path);

/// Talks to the coordinator of a cluster over its bus endpoint.
class coordinator_client {
public:
  explicit coordinator_client(const config::cluster& c);

  /// Submits a run; the run id, or throws std::runtime_error with the coordinator's reason
  /// (or "no answer").
  std::string submit(const msg::submit_run& req, int timeout_ms = 10000);

  /// A run's status JSON ("" = the latest run); nullopt when the coordinator does not answer
  /// within `timeout_ms`; throws std::runtime_error with the coordinator's error otherwise.
  std::optional<nlohmann::json> status(const std::string& run_id, int timeout_ms = 5000);

  /// Asks the coordinator to finish a run's failed jobs; throws std::runtime_error with the
  /// coordinator's reason or "no answer".
  msg::resume_reply resume(const std::string& run_id, int timeout_ms = 10000);

  const std::string& endpoint() const { return endpoint_; }

private:
  std::string endpoint_;
  config::knobs knobs_;
  client_security security_;
};

/// Options of `wait`.
struct wait_options {
  double timeout_s = 0;        ///< 0 = forever
  bool json = false;           ///< print the final status JSON instead of the table
  bool quiet = false;          ///< no per-job lines
  const char* reference_row = nullptr;  ///< printed beside the summary (demo)
};

/// Follows a run, printing a line per job as it finishes, then the summary. Exit code:
/// 0 all succeeded, 1 any failed, 3 timeout, 6 coordinator unreachable.
int wait_for_run(coordinator_client& client, const std::string& run_id,
                 const wait_options& opts);

/// Human-readable status of a run (the table `vidline status` prints).
std::string format_status(const nlohmann::json& status);

/// A run's Gantt chart from its status JSON (`vidline status RUN_ID --gantt`): a lane per
/// pool and per decoder that ran a stage, in the order they first started one, and a bar per
/// stage the jobs finished (the status's per-job `stages`). Throws nlohmann::json::exception
/// on a status without them.
planner::gantt_chart run_gantt(const nlohmann::json& status);

/// `vidline demo`: two nodes on loopback as the reference hosts, the reference 6-job batch.
int run_demo(bool json, const std::string& self_exe);

} // namespace vidline::nodes
