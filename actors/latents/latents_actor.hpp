#pragma once
/// The latents actor: the CAF shell around latents::step, one per host (target
/// `latents`). Every status interval it scans `<data>/latents`, reports what it holds to
/// the coordinator (latent_holdings), removes what was released once its retention is
/// over, and tells the host's pools every interval whether the host is within its latent
/// budget (msg::latent_budget, an event of their machine).

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/context.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors::latents {

/// The latents store's contract: every message it handles, each with who sends it. It
/// answers none. The compiler checks latents_actor's handlers against it.
using latents_role = caf::typed_actor<
  // The coordinator (through the bus): these latents are decoded, remove them once their
  // retention is over.
  caf::reacts_to<msg::latent_release>,
  // Itself, every status interval: scan, report, sweep, tell the pools the budget.
  caf::reacts_to<msg::status_atom>,
  // Chaos tests: fail now, as a crash would (the supervisor restarts it).
  caf::reacts_to<msg::crash_atom>>;

latents_role::behavior_type latents_actor(latents_role::pointer self, context ctx);

} // namespace vidline::actors::latents
