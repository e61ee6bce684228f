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

namespace vidline::actors::coordinator {

void adopt_in_flight(state& s, double now, double mono) {
  for (auto& r : s.runs)
    for (auto& j : r.jobs) {
      // A worker may have been granted a lease just before the restart: a whole one.
      if (j.state == job_state::sampling || j.state == job_state::decoding)
        j.lease_until = mono + s.p.lease_s;
      if (j.state == job_state::sampling) {
        auto it = s.pools.find(j.pool);
        if (it != s.pools.end())
          it->second.assigned = std::make_pair(r.id, j.spec.index);
        j.order_sent_at = now;
      } else if (j.state == job_state::decoding) {
        auto it = s.decoders.find(j.decoder);
        if (it != s.decoders.end())
          it->second.ordered[j.attempt] = now;
        j.order_sent_at = now;
      }
    }
}

coordinator_role::behavior_type coordinator_actor(coordinator_role::pointer self, context ctx,
                                                  std::shared_ptr<journal> jnl,
                                                  input_fetchers fetch) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  sh->jnl = std::move(jnl);
  // The maker answers from its own thread; a weak address, so a pending answer never keeps
  // a stopped coordinator alive (its answer is then dropped, and the input asked again).
  sh->maker = std::make_unique<input_maker>(
    sh->ctx, std::move(fetch.video), [me = self->address()](ev_input_made e) {
      if (auto a = caf::actor_cast<caf::actor>(me))
        caf::anon_send(a, msg::input_made{std::move(e.run_id), e.index, std::move(e.name),
                                          std::move(e.sha256), e.bytes, std::move(e.error)});
    }, std::move(fetch.latent));
  sh->st = coordinator::initial_state(*sh->ctx.cluster, sh->ctx.time_scale);
  coordinator::configure_dispatch(sh->st, *sh->ctx.cluster);
  sh->jnl->load(sh->st.runs, sh->st.next_attempt);
  coordinator::name_default_workflows(*sh->ctx.cluster, sh->st.runs);
  coordinator::restore_drains(sh->st, sh->jnl->load_drains());
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
      handle(*sh, ev_pool_status{std::move(s)});
    },
    [sh](msg::decoder_status& s) {
      inbound::repair(s);
      handle(*sh, ev_decoder_status{std::move(s)});
    },
    [sh](msg::sample_result& r) {
      inbound::repair(r);
      handle(*sh, ev_sample_result{std::move(r)});
    },
    [sh](msg::decode_result& r) {
      inbound::repair(r);
      handle(*sh, ev_decode_result{std::move(r)});
    },
    [sh](msg::latent_holdings& h) { handle(*sh, ev_latent_holdings{std::move(h)}); },
    [sh](msg::verdict_indexed& a) { handle(*sh, ev_verdict_indexed{std::move(a)}); },
    [sh](msg::peer_event& p) { handle(*sh, ev_peer{p.host, p.up}); },
    [sh](msg::input_made& m) {
      handle(*sh, ev_input_made{std::move(m.run_id), m.index, std::move(m.name),
                                       std::move(m.sha256), m.bytes, std::move(m.error)});
    },
    [sh](msg::gpu_report& r) {
      std::vector<ev_gpu_health> health;
      if (!take_report(sh->gpus, *sh->ctx.cluster, r, sh->ctx.run_now(), health))
        return;
      for (auto& e : health)
        handle(*sh, std::move(e));
      if (auto power = power_readings(r); !power.readings.empty())
        handle(*sh, std::move(power));
    },
    [sh](msg::client_call<msg::drain_request>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, drain(*sh, c.body));
    },
    [sh](msg::client_call<msg::review_take>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, review(*sh, c.body));
    },
    [sh](msg::client_call<msg::submit_run>& c) {
      auto reply = submit(*sh, c.body);
      sh->ctx.out->reply(c.reply_to, c.correlation, reply);
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
    // The same requests in-process (a CAF request): the same functions answer.
    [sh](msg::drain_request& r) { return drain(*sh, r); },
    [sh](msg::review_take& r) { return review(*sh, r); },
    [sh](msg::submit_run& r) { return submit(*sh, r); },
    [sh](msg::resume_run& r) { return resume(*sh, r.run_id); },
    [sh](msg::cancel_run& r) { return cancel(*sh, r); },
    [sh](msg::submit_jobs& r) { return add_jobs(*sh, r); },
    [sh](msg::runs_query& q) { return runs(*sh, q.all); },
    [sh](msg::status_query& q) {
      return status(*sh, q.run_id, status_page{q.offset, q.limit});
    },
    [self, sh, interval](msg::tick_atom) {
      handle(*sh, ev_tick{});
      observe(*sh);
      count(*sh);
      self->delayed_send(self, interval, msg::tick_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors::coordinator
