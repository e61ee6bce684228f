#pragma once
/// The latents actor: the CAF shell around storing::step, one per host (target
/// `latents`). Every status interval it scans `<data>/latents`, reports what it holds to
/// the coordinator (latent_holdings), removes what was released once its retention is
/// over, and tells the host's pools every interval whether the host is within its latent
/// budget (msg::latent_budget, an event of their machine).

#include <caf/event_based_actor.hpp>

#include "actors/context.hpp"

namespace vidline::actors {

caf::behavior latents_actor(caf::event_based_actor* self, context ctx);

} // namespace vidline::actors
