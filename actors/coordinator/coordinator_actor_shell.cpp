// The coordinator shell's step: effects executed (the journal first, then messages), the
// metrics read off the state, runs read back from the journal, run ids.

#include "actors/coordinator/coordinator_actor_shell.hpp"

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "common/metrics.hpp"
#include "messages/actor_types.hpp"
#include "messages/gpu_actor_types.hpp"
#include "messages/input_actor_types.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::actors::coordinator {

/// Executes effects: everything to persist goes to the journal in one transaction first,
/// then messages leave. A journal failure throws: the supervisor restarts the coordinator,
/// which reloads the journal, and nothing unrecorded was sent.
void execute(shell& sh, const std::vector<effect>& fx) {
  std::vector<const run*> runs;
  std::vector<const job*> jobs;
  std::set<std::pair<std::string, uint32_t>> seen_jobs;
  std::set<std::string> seen_runs;
  for (auto& e : fx) {
    if (auto* p = std::get_if<fx_persist_job>(&e)) {
      if (seen_jobs.insert({p->run_id, p->index}).second)
        if (auto* j = sh.st.find_job(p->run_id, p->index))
          jobs.push_back(j);
    } else if (auto* r = std::get_if<fx_persist_run>(&e)) {
      if (seen_runs.insert(r->run_id).second)
        if (auto* run = sh.st.find_run(r->run_id))
          runs.push_back(run);
    }
  }
  if (!runs.empty() || !jobs.empty())
    sh.jnl->write(runs, jobs, sh.st.next_attempt);
  for (auto& e : fx)
    if (std::holds_alternative<fx_persist_drains>(e)) {
      sh.jnl->write_drains(sh.st.drains);
      break;
    }
  for (auto& e : fx) {
    if (auto* s = std::get_if<fx_send_sample>(&e))
      sh.ctx.out->send(s->host, "pool:" + s->order.pool, s->order);
    else if (auto* d = std::get_if<fx_send_decode>(&e))
      sh.ctx.out->send(d->host, "decoder:" + d->order.decoder, d->order);
    else if (auto* a = std::get_if<fx_ack>(&e))
      sh.ctx.out->send(a->host, a->target, msg::result_ack{a->target, a->attempt, a->discard});
    else if (auto* g = std::get_if<fx_grant>(&e))
      sh.ctx.out->send(g->host, g->target, g->grant);
    else if (auto* v = std::get_if<fx_send_verdict>(&e))
      sh.ctx.out->send(v->host, "decoder:" + v->v.decoder, v->v);
    else if (auto* rl = std::get_if<fx_release>(&e))
      sh.ctx.out->send(rl->host, "latents", msg::latent_release{rl->host, rl->sha256s});
    else if (auto* dc = std::get_if<fx_drain_changed>(&e))
      metrics::global().add("vidline_drain_changes_total",
                            {{"target", dc->target}, {"drained", dc->drained ? "1" : "0"}});
    else if (auto* l = std::get_if<fx_log>(&e))
      spdlog::log(static_cast<spdlog::level::level_enum>(l->level), "coordinator: {}", l->text);
    else if (auto* dr = std::get_if<fx_drop_runs>(&e)) {
      if (sh.recent && std::count(dr->run_ids.begin(), dr->run_ids.end(), sh.recent->id) != 0)
        sh.recent.reset();
      sh.jnl->drop(dr->run_ids);  // throws like write: a restart loads and drops them again
      metrics::global().add("vidline_journal_runs_dropped_total", {},
                            static_cast<double>(dr->run_ids.size()));
    }
  }
}

/// Jobs and runs by state, hosts up: read off the state each tick (docs/metrics.md).
void observe(const shell& sh) {
  std::map<std::string, double> jobs, runs;
  for (auto s : {job_state::queued, job_state::sampling, job_state::sampled,
                 job_state::decoding, job_state::succeeded, job_state::failed,
                 job_state::waiting, job_state::reused})
    jobs[coordinator::to_string(s)] = 0;
  for (auto s : {"running", "succeeded", "failed"})
    runs[s] = 0;
  for (auto& r : sh.st.runs) {
    runs[run_state(r)] += 1;
    for (auto& j : r.jobs)
      jobs[coordinator::to_string(j.state)] += 1;
  }
  auto& reg = metrics::global();
  for (auto& [state, n] : jobs)
    reg.set("vidline_jobs", {{"state", state}}, n);
  for (auto& [state, n] : runs)
    reg.set("vidline_runs", {{"state", state}}, n);
  for (auto& [host, up] : sh.st.hosts_up)
    reg.set("vidline_host_up", {{"host", host}}, up ? 1 : 0);
  reg.clear("vidline_drained");
  for (auto& [name, p] : sh.st.pools)
    reg.set("vidline_drained", {{"target", "pool:" + name}}, p.drained ? 1 : 0);
  for (auto& [name, d] : sh.st.decoders)
    reg.set("vidline_drained", {{"target", "decoder:" + name}}, d.drained ? 1 : 0);
}

/// Counters of the state since the last look (observe's counterpart for counters).
void count(shell& sh) {
  auto& reg = metrics::global();
  reg.add("vidline_runs_forgotten_total", {},
          static_cast<double>(sh.st.runs_forgotten - sh.forgotten_seen));
  reg.add("vidline_unknown_job_results_total", {},
          static_cast<double>(sh.st.unknown_job_results - sh.unknown_seen));
  reg.add("vidline_gpu_seconds_paid_twice_total", {}, sh.st.gpu_s_redone - sh.gpu_s_seen);
  sh.gpu_s_seen = sh.st.gpu_s_redone;
  reg.add("vidline_jobs_reused_total", {}, static_cast<double>(sh.st.jobs_reused - sh.reused_seen));
  sh.reused_seen = sh.st.jobs_reused;
  sh.forgotten_seen = sh.st.runs_forgotten;
  sh.unknown_seen = sh.st.unknown_job_results;
}

/// A run the state no longer holds (forgotten, docs/reliability.md "Retention"), as the
/// journal recorded it; nullopt when it has none. `error` says why a read failed.
std::optional<run> from_journal(shell& sh, const std::string& run_id, std::string& error) {
  if (sh.recent && sh.recent->id == run_id)
    return sh.recent;
  try {
    auto r = sh.jnl->load_run(run_id);
    if (r)
      sh.recent = r;
    return r;
  } catch (const std::exception& e) {
    error = std::string("cannot read run ") + run_id + " from the journal: " + e.what();
    return std::nullopt;
  }
}

/// Steps the scheduler and executes its effects; the machine's answer to a submit or an
/// add of jobs (fx_accepted), when it gave one; `answers` gets its answers to a client.
std::optional<fx_accepted> handle(shell& sh, const event& e,
                                         std::vector<effect>* answers) {
  auto fx = coordinator::step(sh.st, e, sh.ctx.run_now(), sh.ctx.mono_now());
  std::optional<fx_accepted> accepted;
  std::vector<fx_make_input> inputs;
  for (auto& x : fx)
    if (auto* a = std::get_if<fx_accepted>(&x))
      accepted = *a;
    else if (answers != nullptr && (std::holds_alternative<fx_submit_answer>(x)
                                    || std::holds_alternative<fx_add_jobs_answer>(x)))
      answers->push_back(x);
    else if (auto* m = std::get_if<fx_make_input>(&x))
      inputs.push_back(*m);
  execute(sh, std::move(fx));
  // Inputs of shots that follow shots, made once the state that asked for them is durable:
  // a sim video's at once, a real one's answered later (msg::input_made).
  for (auto& m : inputs)
    if (auto made = sh.maker->ask(m))
      handle(sh, *made);
  return accepted;
}

std::string new_run_id(const context& ctx) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d%02d%02d-%02d%02d%02d-%04x", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<unsigned>(ctx.random64() & 0xffff));
  return buf;
}

} // namespace vidline::actors::coordinator
