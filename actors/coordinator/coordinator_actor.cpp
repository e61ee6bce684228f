// The coordinator's CAF shell: what it does on start, and its behavior, a handler a message.
// Its parts: coordinator_actor_shell.hpp.

#include "actors/coordinator/coordinator_actor.hpp"

#include <chrono>
#include <memory>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/coordinator_actor_shell.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/inbound.hpp"
#include "messages/actor_types.hpp"
#include "messages/gpu_actor_types.hpp"
#include "messages/input_actor_types.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::actors {

using namespace coordinator_shell;

void adopt_in_flight(sched::state& s, double now, double mono) {
  for (auto& r : s.runs)
    for (auto& j : r.jobs) {
      // A worker may have been granted a lease just before the restart: a whole one.
      if (j.state == sched::job_state::sampling || j.state == sched::job_state::decoding)
        j.lease_until = mono + s.p.lease_s;
      if (j.state == sched::job_state::sampling) {
        auto it = s.pools.find(j.pool);
        if (it != s.pools.end())
          it->second.assigned = std::make_pair(r.id, j.spec.index);
        j.order_sent_at = now;
      } else if (j.state == sched::job_state::decoding) {
        auto it = s.decoders.find(j.decoder);
        if (it != s.decoders.end())
          it->second.ordered[j.attempt] = now;
        j.order_sent_at = now;
      }
    }
}

namespace {

/// `vidline drain` / `undrain`: the machine's answer to the drain.
msg::drain_reply drain(shell& sh, const msg::drain_request& d) {
  auto fx = sched::step(sh.st, sched::ev_drain{d.kind, d.name, d.drain, d.reason},
                        sh.ctx.run_now(), sh.ctx.mono_now());
  msg::drain_reply reply;
  for (auto& x : fx)
    if (auto* a = std::get_if<sched::fx_drain_answer>(&x)) {
      reply.targets = a->targets;
      reply.error = a->error;
      reply.code = a->error.empty() ? "" : "not_found";
    }
  execute(sh, fx);
  return reply;
}

} // namespace

caf::behavior coordinator_actor(caf::event_based_actor* self, context ctx,
                                std::shared_ptr<journal> jnl, input_fetchers fetch) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  sh->jnl = std::move(jnl);
  // The maker answers from its own thread; a weak address, so a pending answer never keeps
  // a stopped coordinator alive (its answer is then dropped, and the input asked again).
  sh->maker = std::make_unique<input_maker>(
    sh->ctx, std::move(fetch.video), [me = self->address()](sched::ev_input_made e) {
      if (auto a = caf::actor_cast<caf::actor>(me))
        caf::anon_send(a, msg::input_made{std::move(e.run_id), e.index, std::move(e.name),
                                          std::move(e.sha256), e.bytes, std::move(e.error)});
    }, std::move(fetch.latent));
  sh->st = dispatching::initial_state(*sh->ctx.cluster, sh->ctx.time_scale);
  dispatching::configure_dispatch(sh->st, *sh->ctx.cluster);
  sh->jnl->load(sh->st.runs, sh->st.next_attempt);
  dispatching::name_default_workflows(*sh->ctx.cluster, sh->st.runs);
  sched::restore_drains(sh->st, sh->jnl->load_drains());
  adopt_in_flight(sh->st, sh->ctx.run_now(), sh->ctx.mono_now());
  bool simulated = true;
  for (auto& [name, b] : sh->ctx.cluster->backends)
    if (b.type != "sim")
      simulated = false;
  sh->clock = clock_note{simulated, sh->ctx.time_scale};
  std::size_t unfinished = 0;
  for (auto& r : sh->st.runs)
    unfinished += r.done ? 0 : 1;
  spdlog::info("coordinator: up; journal holds {} runs ({} unfinished), next attempt {}",
               sh->st.runs.size(), unfinished, sh->st.next_attempt);
  auto interval = std::chrono::milliseconds(sh->ctx.cluster->knobs.status_interval_ms);
  self->send(self, msg::tick_atom::value);
  return {
    // Reports come from other hosts: repaired before anything of them reaches the journal.
    [sh](msg::pool_status& s) {
      inbound::repair(s);
      handle(*sh, sched::ev_pool_status{std::move(s)});
    },
    [sh](msg::decoder_status& s) {
      inbound::repair(s);
      handle(*sh, sched::ev_decoder_status{std::move(s)});
    },
    [sh](msg::sample_result& r) {
      inbound::repair(r);
      handle(*sh, sched::ev_sample_result{std::move(r)});
    },
    [sh](msg::decode_result& r) {
      inbound::repair(r);
      handle(*sh, sched::ev_decode_result{std::move(r)});
    },
    [sh](msg::latent_holdings& h) { handle(*sh, sched::ev_latent_holdings{std::move(h)}); },
    [sh](msg::verdict_indexed& a) { handle(*sh, sched::ev_verdict_indexed{std::move(a)}); },
    [sh](msg::peer_event& p) { handle(*sh, sched::ev_peer{p.host, p.up}); },
    [sh](msg::input_made& m) {
      handle(*sh, sched::ev_input_made{std::move(m.run_id), m.index, std::move(m.name),
                                       std::move(m.sha256), m.bytes, std::move(m.error)});
    },
    [sh](msg::gpu_report& r) {
      std::vector<sched::ev_gpu_health> health;
      if (!take_report(sh->gpus, *sh->ctx.cluster, r, sh->ctx.run_now(), health))
        return;
      for (auto& e : health)
        handle(*sh, std::move(e));
      if (auto power = power_readings(r); !power.readings.empty())
        handle(*sh, std::move(power));
    },
    // Requests from command-line clients, answered over the bus...
    [sh](msg::client_call<msg::drain_request>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, drain(*sh, c.body));
    },
    [sh](msg::client_call<msg::review_take>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, review(*sh, c.body));
    },
    [sh](msg::client_call<msg::submit_run>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, submit(*sh, c.body));
    },
    [sh](msg::client_call<msg::resume_run>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, resume(*sh, c.body.run_id));
    },
    [sh](msg::client_call<msg::cancel_run>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, cancel(*sh, c.body));
    },
    [sh](msg::client_call<msg::submit_jobs>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, add_jobs(*sh, c.body));
    },
    [sh](msg::client_call<msg::runs_query>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, runs(*sh, c.body.all));
    },
    [sh](msg::client_call<msg::status_query>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation,
                         status(*sh, c.body.run_id, status_page{c.body.offset, c.body.limit}));
    },
    // ... and the same requests made in this process (the HTTP API: CAF requests).
    [sh](msg::drain_request& r) { return drain(*sh, r); },
    [sh](msg::review_take& r) { return review(*sh, r); },
    [sh](msg::submit_run& r) { return submit(*sh, r); },
    [sh](msg::resume_run& r) { return resume(*sh, r.run_id); },
    [sh](msg::cancel_run& r) { return cancel(*sh, r); },
    [sh](msg::submit_jobs& r) { return add_jobs(*sh, r); },
    [sh](msg::runs_query& r) { return runs(*sh, r.all); },
    [sh](msg::status_query& r) { return status(*sh, r.run_id, status_page{r.offset, r.limit}); },
    [self, sh, interval](msg::tick_atom) {
      handle(*sh, sched::ev_tick{});
      observe(*sh);
      count(*sh);
      self->delayed_send(self, interval, msg::tick_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors
