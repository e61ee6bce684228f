#include "actors/supervisor/supervisor.hpp"

#include <map>
#include <memory>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "common/metrics.hpp"

namespace vidline::actors::supervisor {
namespace {

struct child {
  child_spec spec;
  restart_budget budget;
  caf::actor handle;
};

struct sup_state {
  supervisor_options opts;
  std::vector<child> children;
  bool stopping = false;
  bool gave_up = false;
};

void start_child(supervisor_role::pointer self, child& c, registry* reg) {
  c.handle = c.spec.spawn(self);
  self->monitor(c.handle);
  self->link_to(c.handle);  // children die with the supervisor
  if (reg != nullptr)
    reg->put(c.spec.name, c.handle);
}

} // namespace

supervisor_role::behavior_type supervisor(supervisor_role::pointer self,
                                          supervisor_options opts) {
  auto st = std::make_shared<sup_state>();
  st->opts = std::move(opts);
  for (auto& spec : st->opts.children)
    st->children.push_back(child{spec, restart_budget{spec.policy.max_restarts, spec.policy.period_s}, {}});
  // Linked children must not take the supervisor down with them: trap their exits; only a
  // shutdown request stops it (and, through the links, every child).
  self->set_exit_handler([self, st](caf::exit_msg& m) {
    if (m.reason == caf::exit_reason::user_shutdown) {
      st->stopping = true;
      self->quit(m.reason);
    }
  });
  self->set_down_handler([self, st](caf::down_msg& m) {
    for (auto& c : st->children) {
      if (c.handle.address() != m.source)
        continue;
      if (st->opts.reg != nullptr)
        st->opts.reg->remove(c.spec.name, m.source);
      if (st->stopping || st->gave_up)
        return;
      auto reason = to_string(m.reason);
      double now = st->opts.now ? st->opts.now() : 0.0;
      if (!c.budget.try_restart(now)) {
        st->gave_up = true;
        spdlog::critical("supervisor: {} went down ({}) and its restart budget is spent",
                         c.spec.name, reason);
        if (st->opts.give_up)
          st->opts.give_up(c.spec.name, reason);
        return;
      }
      spdlog::warn("supervisor: {} went down ({}); restart {} within its period",
                   c.spec.name, reason, c.budget.recent());
      metrics::global().add("vidline_actor_restarts_total", {{"actor", c.spec.name}});
      start_child(self, c, st->opts.reg);
      return;
    }
  });
  for (auto& c : st->children)
    start_child(self, c, st->opts.reg);
  return {
    [self, st](caf::exit_reason r) {
      st->stopping = true;
      self->quit(r);
    },
  };
}

} // namespace vidline::actors::supervisor
