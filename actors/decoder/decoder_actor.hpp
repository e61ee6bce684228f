#pragma once
/// The decoder actor: the CAF shell around decoding::step. Pulls each ordered latent from
/// its sampling host through the data plane, decodes it through its backend on a worker
/// thread, and reports `decoder_status` (credits included) to the coordinator.

#include <caf/event_based_actor.hpp>

#include "actors/context.hpp"

namespace vidline::actors {

caf::behavior decoder_actor(caf::event_based_actor* self, context ctx, config::decoder dec);

} // namespace vidline::actors
