#pragma once
/// The pool actor: the CAF shell around pooling::step. Runs each sampling attempt through
/// its backend on a worker thread and reports `pool_status` to the coordinator.

#include <caf/event_based_actor.hpp>

#include "actors/context.hpp"

namespace vidline::actors {

caf::behavior pool_actor(caf::event_based_actor* self, context ctx, config::pool pool);

} // namespace vidline::actors
