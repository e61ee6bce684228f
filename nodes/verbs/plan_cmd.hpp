#pragma once
/// `vidline plan`: a batch planned ahead on a virtual clock (actors/planner), printed as a
/// table, JSON (the status contract's names) or a Gantt chart. Works without any file: the
/// reference cluster and profile are embedded.

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/planner/plan.hpp"
#include "config/config.hpp"

namespace vidline::nodes::verbs {

/// A cluster ready to plan on: its config, the profile, and the coordinator's state.
struct plan_setup {
  config::cluster cluster;
  std::shared_ptr<const actors::coordinator::profile_estimates> est;
  actors::coordinator::state state;
  std::string profile_source;  ///< "embedded reference" or the file
};

/// Loads a config (empty = the embedded reference cluster) and a profile (empty = the one
/// the config's sim backends name, else the embedded reference); each mode dispatches by
/// its configured policy, or `policy` (if not empty) for every mode but auto. Throws config::config_error,
/// config::profile::profile_error, std::invalid_argument.
plan_setup load_plan_setup(const std::string& config_file, const std::string& profile_file,
                           const std::string& policy = "");

/// One planned batch as JSON: the request, the mode, per job its pool and stage times, and a
/// "summary" with the status contract's names (first_finish_s, makespan_s, clips_per_hour).
nlohmann::json plan_json(const actors::planner::plan_result& p, const actors::planner::request& req);

/// The most jobs `vidline plan` plans at once. The planner runs the coordinator's own
/// scheduler, which holds every job of the batch in memory; this bounds a plan's memory
/// (and its time) the way knobs.max_jobs_per_run bounds a coordinator's. A larger count is
/// refused up front, naming it.
inline constexpr uint32_t plan_max_jobs = 1000000;

/// Above this many jobs a plan keeps only its summary: no row per job in the table or the
/// JSON, and no Gantt chart (its memory would grow with four stage records per job).
inline constexpr uint32_t plan_detail_max_jobs = 20000;

/// The options of `vidline plan`.
struct plan_options {
  std::string mode, config, profile, gantt, policy;
  uint32_t width = 0, height = 0, seconds = 0, count = 1;
  uint64_t seed = 0;
  bool json = false;
  std::string jobs;                ///< --jobs FILE: a shot list (nodes/verbs/shot_file.hpp)
  std::vector<std::string> given;  ///< the uniform options given (refused with --jobs)
};

/// Runs `vidline plan`; returns the exit code.
int run_plan(const plan_options& o);

} // namespace vidline::nodes::verbs
