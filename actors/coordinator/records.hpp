#pragma once
/// Runs and jobs as JSON: the journal's record format and the status contract's fields.
/// Pure: no I/O.

#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// A job as the journal stores it (every field; reads back with job_from_record).
nlohmann::json job_record(const job& j);
/// Throws nlohmann::json::exception or std::runtime_error on a malformed record.
job job_from_record(const nlohmann::json& r);

nlohmann::json run_record(const run& r);
run run_from_record(const nlohmann::json& r);

/// How a run's clock relates to real time, for the status output.
struct clock_note {
  bool simulated = false;   ///< the sim backend's scaled clock
  double time_scale = 1.0;  ///< real seconds per run-clock second
};

/// The state of a run as the status contract names it: "running", "succeeded", "failed",
/// "cancelled" (the whole run cancelled, or every job of it).
std::string run_state(const run& r);

/// `vidline runs`: one object per run, oldest first by submission (run_id, state, mode,
/// priority, done, total, per-state counts, eta_s, age_s, from_journal); finished runs only
/// the newest 20 unless `all`. `journaled`: runs the state forgot, as the journal holds them
/// (from_journal true), listed beside those of the state.
nlohmann::json runs_json(const state& s, double now, bool all,
                         const std::deque<run>& journaled = {});

/// The coordinator's view of the cluster: hosts, pools and decoders, alive or not
/// (`status_query` with run_id "@cluster").
nlohmann::json cluster_json(const state& s);

/// `vidline status RUN_ID --json`, per docs/sim-contract.md, at run-clock time `now`:
/// per job one record per stage (docs/design.md, "Stage times in the status"), what runs
/// now and the failed attempts; the run's lanes (from `s`: the mode's pools and decoders,
/// in the config's order, with their hosts) and the outages of hosts while it ran.
/// A page of it: the jobs from index `offset`, at most `limit` of them (0 = all the rest);
/// `page` says which and how many there are, and `states` counts every job by state, so a
/// client follows a run of any size from small answers (docs/design.md, "Status pages").
struct status_page {
  std::size_t offset = 0;
  std::size_t limit = 0;
};
nlohmann::json status_json(const state& s, const run& r, const clock_note& clock,
                           double now, status_page page = {});

} // namespace vidline::actors::coordinator
