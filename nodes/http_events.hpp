#pragma once
/// The events of the HTTP API's Server-Sent Events stream (docs/http.md, "Events"), made
/// on the server by comparing two status JSONs of a run (or of the cluster) one poll apart.
/// Pure: no clock, no I/O.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::nodes::events {

struct event {
  std::string name;     ///< SSE `event:` (snapshot, run, job, progress, failure, cluster, plan, end)
  nlohmann::json data;  ///< SSE `data:` (one line of JSON)
};

/// What changed between two statuses of one run (`before` null: nothing seen yet, so
/// nothing but a `snapshot` of `now`):
/// - `run`: the run's state, summary, outages or size changed: {run_id, state, mode,
///   priority, done, total, summary, outages, now_s} (done counts cancelled jobs too)
/// - `job`: a job added to the run (`vidline submit`), or a job's state (`cancelled` too),
///   lanes, running stage, stage times, error or output changed: the job's record of the
///   status (its `progress` left out), plus run_id
/// - `progress`: a sampling job's step changed: {run_id, index, step, steps}
/// - `failure`: an attempt failed (a new entry of failed_attempts: {run_id, index, stage,
///   lane, start_s, end_s, reason}), or a job failed for good (stage "job", reason: its error)
/// - `end`: the run reached succeeded, failed or cancelled: {run_id, state, summary}
std::vector<event> run_events(const nlohmann::json& before, const nlohmann::json& now);

/// `cluster` when the coordinator's view of hosts, pools, decoders or drains changed (the
/// whole `status @cluster` JSON), or first seen; a change of the cards' figures (`gpus`)
/// alone is none.
std::vector<event> cluster_events(const nlohmann::json& before, const nlohmann::json& now);

/// The `run` event's data for a status.
nlohmann::json run_summary(const nlohmann::json& status);

/// One event as the SSE wire carries it: "id: N\nevent: NAME\ndata: JSON\n\n".
std::string sse_text(const event& e, uint64_t id);

} // namespace vidline::nodes::events
