#pragma once
/// Drains, inside the scheduler: the handlers of ev_drain and ev_gpu_health (scheduler.hpp).
/// A drained pool or decoder takes no new order; the stage it runs finishes and its
/// results count as ever. Its jobs are planned on the others (a pool drained is out of
/// service for the policies, as a pool whose host is down).

#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// `vidline drain` / `undrain` by hand.
void apply_drain(state& s, const ev_drain& e, double now, std::vector<effect>& fx);
/// A card's reported health: a change drains or releases the card's users.
void apply_gpu_health(state& s, const ev_gpu_health& e, double now, std::vector<effect>& fx);

} // namespace vidline::actors::coordinator
