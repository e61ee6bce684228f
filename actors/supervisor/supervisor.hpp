#pragma once
/// The supervisor of one node's actors (CAF 0.17 has none: monitor + down handler).
/// Restarts a child that went down, within its restart budget; when a budget is spent it
/// calls `give_up`, and the node exits so its service manager can restart it whole.

#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>

#include "actors/outbox.hpp"
#include "common/restart_budget.hpp"
#include "config/knobs.hpp"

namespace vidline::actors {

/// One supervised child: how to (re)spawn it and how often it may fail.
struct child_spec {
  std::string name;  ///< registry name, e.g. "pool:four_a"
  config::restart_policy policy;
  /// Spawns the child (not yet monitored) from the supervisor's context.
  std::function<caf::actor(caf::event_based_actor*)> spawn;
};

struct supervisor_options {
  std::vector<child_spec> children;
  registry* reg = nullptr;
  /// Called once, from the supervisor, when a child's restart budget is spent.
  std::function<void(const std::string& child, const std::string& reason)> give_up;
  /// Monotonic seconds (injected so tests can drive it).
  std::function<double()> now;
};

/// Spawns and supervises `opts.children`. Send it `caf::exit_reason::user_shutdown` (via
/// send_exit) to stop it and all children.
caf::behavior supervisor(caf::event_based_actor* self, supervisor_options opts);

} // namespace vidline::actors
