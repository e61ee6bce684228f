#pragma once
/// The scheduler's index, inside: the mutators the stepper (stepper.hpp) calls to keep
/// run_index current with every change of state. Not for use outside the scheduler; the
/// public face is scheduler.hpp (reindex, check_index).

#include <cstddef>
#include <cstdint>
#include <string>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator::detail {

/// A queued or sampled job waiting out its retry backoff (state_index::backoff).
bool backing_off(const job& j);
/// Moves a job to another state, keeping the index current. A change of state ends any
/// retry backoff (hold_back() starts one after it).
void move_job(state& s, job& j, job_state to);
/// Sets (until >= 0) or ends (-1) a queued or sampled job's retry backoff.
void set_retry_at(state& s, job& j, double until);
/// Ends every backoff that is over by `now`: those jobs may be ordered again.
void end_backoffs(state& s, double now);
/// The ids of a mode's pools in order (each once), and each pool id's position in it.
void index_mode(state& s, const std::string& mode);
/// Indexes run `rp` (its jobs as they are).
void index_run(state& s, std::size_t rp);
/// The runs in dispatch order: priority (higher first), then submission order.
void order_runs(state& s);
/// Whether pool `id` is free and whether it is out of service, in the index's flags.
void set_flags(state& s, uint32_t id);
/// A pool changed: it, and every pool whose freedom depends on it, are looked at again.
void refresh_pool(state& s, uint32_t id);
/// Points the index at this state (after the state was copied or moved).
void relink(state& s);

} // namespace vidline::actors::coordinator::detail
