#pragma once
/// The supervisor of one node's actors (CAF 0.17 has none: monitor + down handler).
/// Restarts a child that went down, within its restart budget; when a budget is spent it
/// calls `give_up`, and the node exits so its service manager can restart it whole.

#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/outbox.hpp"
#include "common/restart_budget.hpp"
#include "config/knobs.hpp"

namespace vidline::actors::supervisor {

/// The supervisor's contract: the one message its behavior handles. Its children's exits
/// and downs come to its exit and down handlers (system messages, outside any contract).
using supervisor_role = caf::typed_actor<
  // The node, or anyone: stop the supervisor and, through their links, its children.
  caf::reacts_to<caf::exit_reason>>;

/// One supervised child: how to (re)spawn it and how often it may fail.
struct child_spec {
  std::string name;  ///< registry name, e.g. "pool:four_a"
  config::restart_policy policy;
  /// Spawns the child (not yet monitored) from the supervisor's context; a typed child's
  /// handle is cast to caf::actor for the registry (its contract is checked at the child).
  std::function<caf::actor(supervisor_role::pointer)> spawn;
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
supervisor_role::behavior_type supervisor(supervisor_role::pointer self,
                                          supervisor_options opts);

} // namespace vidline::actors::supervisor
