#pragma once
/// The pool actor: the CAF shell around pool::step. Runs each sampling attempt through
/// its backend on a worker thread and reports `pool_status` to the coordinator.

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/context.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors::pool {

/// The pool's contract: every message it handles, each with who sends it. It answers none
/// (its results and status go to the coordinator through the bus). The compiler checks
/// pool_actor's handlers against it.
using pool_role = caf::typed_actor<
  // The coordinator (through the bus): sample this job.
  caf::reacts_to<msg::sample_order>,
  // The coordinator: a result arrived; the pool stops resending it.
  caf::reacts_to<msg::result_ack>,
  // The coordinator: leases renewed; a latent is kept only under its lease.
  caf::reacts_to<msg::lease_grant>,
  // Its own worker thread: a sampling or the warm start ended.
  caf::reacts_to<msg::stage_done>,
  // The sampler's thread: a checkpoint is durable in the host's latent store.
  caf::reacts_to<msg::checkpoint_saved>,
  // The host's latents store, every interval: whether the host is within its budget.
  caf::reacts_to<msg::latent_budget>,
  // Itself, every status interval: the stall watchdog, then pool_status to the coordinator.
  caf::reacts_to<msg::status_atom>,
  // Chaos tests: fail now, as a crash would (the supervisor restarts it).
  caf::reacts_to<msg::crash_atom>>;

pool_role::behavior_type pool_actor(pool_role::pointer self, context ctx, config::pool pool);

} // namespace vidline::actors::pool
