#pragma once
/// Runs and jobs as JSON: the journal's record format and the status contract's fields.
/// Pure: no I/O.

#include <string>

#include <nlohmann/json.hpp>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors {

/// A job as the journal stores it (every field; reads back with job_from_record).
nlohmann::json job_record(const sched::job& j);
/// Throws nlohmann::json::exception or std::runtime_error on a malformed record.
sched::job job_from_record(const nlohmann::json& r);

nlohmann::json run_record(const sched::run& r);
sched::run run_from_record(const nlohmann::json& r);

/// How a run's clock relates to real time, for the status output.
struct clock_note {
  bool simulated = false;   ///< the sim backend's scaled clock
  double time_scale = 1.0;  ///< real seconds per run-clock second
};

/// The state of a run as the status contract names it: "running", "succeeded", "failed".
std::string run_state(const sched::run& r);

/// The coordinator's view of the cluster: hosts, pools and decoders, alive or not
/// (`status_query` with run_id "@cluster").
nlohmann::json cluster_json(const sched::state& s);

/// `vidline status RUN_ID --json`, per docs/sim-contract.md.
nlohmann::json status_json(const sched::run& r, const clock_note& clock);

} // namespace vidline::actors
