#include "actors/pool/pool_machine.hpp"

#include <algorithm>

namespace vidline::actors::pool {
namespace {

constexpr std::size_t recent_done_kept = 256;

bool known(const state& s, uint64_t attempt) {
  if (s.current && s.current->attempt == attempt)
    return true;
  for (auto& r : s.unacked)
    if (r.attempt == attempt)
      return true;
  return std::find(s.recent_done.begin(), s.recent_done.end(), attempt) != s.recent_done.end();
}

double unix_of(const state& s, double run_s) { return run_s < 0 ? 0 : run_s * s.time_scale; }

msg::sample_result result_of(const state& s) {
  msg::sample_result r;
  r.pool = s.pool;
  r.host = s.host;
  r.attempt = s.current->attempt;
  r.run_id = s.current->job.run_id;
  r.index = s.current->job.index;
  r.conditioning_s = s.conditioning_s;
  r.start_unix_s = unix_of(s, s.started_at);
  r.sampling_start_unix_s = unix_of(s, s.sampling_started_at);
  r.checkpoints = s.checkpoints;
  return r;
}

/// The result `r` ends now: its end stamp.
msg::sample_result ended(const state& s, msg::sample_result r, double now) {
  r.end_unix_s = unix_of(s, now);
  return r;
}

void finish(state& s, msg::sample_result r) {
  s.recent_done.push_back(r.attempt);
  while (s.recent_done.size() > recent_done_kept)
    s.recent_done.pop_front();
  s.unacked.push_back(std::move(r));
  s.current.reset();
  s.at = phase::idle;
  s.conditioning_s = 0;
  s.lease_until = -1;
  s.ended = false;
  s.staged.clear();
  s.started_at = s.sampling_started_at = -1;
  s.checkpoints.clear();
  s.preempting = false;
  s.progress_step = 0;
  s.progress_at = -1;
  s.stalled = false;
}

/// Whether the watchdog watches the current attempt: on, and its sampler is expected to
/// report steps.
bool watched(const state& s) {
  return s.stall_s > 0 && s.current
         && (s.steps_expected || s.stepping_workflows.count(s.current->job.workflow) > 0);
}

std::string job_name(const state& s) {
  return s.current->job.run_id + "/" + std::to_string(s.current->job.index);
}

bool has(const std::vector<uint64_t>& v, uint64_t a) {
  return std::find(v.begin(), v.end(), a) != v.end();
}

void commit(state& s, std::vector<effect>& fx) {
  if (!s.staged.empty())
    fx.push_back(fx_commit{*s.current, s.staged, s.made.latent_sha256, s.made.latent_bytes});
  finish(s, s.made);
}

void discard(state& s, std::vector<effect>& fx) {
  ++s.fenced;
  if (!s.staged.empty())
    fx.push_back(fx_discard{*s.current, s.staged});
  fx.push_back(fx_log{3, "attempt " + std::to_string(s.current->attempt) + " of "
                           + s.current->job.run_id + "/" + std::to_string(s.current->job.index)
                           + ": its lease ended and the coordinator gave the job to another "
                             "pool: the latent is removed, not published"});
  auto r = s.made;
  r.outcome = msg::outcome::fenced;
  r.error = "lease ended: the stage went to another attempt";
  r.latent_sha256.clear();
  r.latent_bytes = 0;
  finish(s, std::move(r));
}

/// The result of an attempt the coordinator ended before it made anything.
msg::sample_result fenced_result(const state& s) {
  auto r = result_of(s);
  r.outcome = msg::outcome::fenced;
  r.error = "lease ended: the stage went to another attempt";
  return r;
}

} // namespace

msg::pool_status state::status(double mono_s) {
  msg::pool_status st;
  st.seq = ++status_seq;
  if (mono_s >= 0)
    reports.note(st.seq, mono_s);
  st.fenced = fenced;
  st.pool = pool;
  st.host = host;
  st.epoch = epoch;
  st.busy_attempt = current ? current->attempt : 0;
  st.unacked = unacked;
  st.accepting = accepting;
  if (current)
    st.checkpoints = checkpoints;
  return st;
}

std::vector<effect> step(state& s, const event& e, double now) {
  std::vector<effect> fx;
  if (auto* o = std::get_if<ev_order>(&e)) {
    if (known(s, o->order.attempt))
      return fx;
    if (s.current) {
      ++s.refused_orders;
      fx.push_back(fx_log{3, "order " + std::to_string(o->order.attempt) + " refused: busy with "
                               + std::to_string(s.current->attempt)});
      fx.push_back(fx_report{});
      return fx;
    }
    s.current = o->order;
    s.checkpoints.clear();
    s.preempting = false;
    s.at = phase::conditioning;
    s.started_at = now;
    s.sampling_started_at = -1;
    fx.push_back(fx_condition{o->order});
    fx.push_back(fx_report{});
  } else if (auto* c = std::get_if<ev_conditioned>(&e)) {
    if (!s.current || s.current->attempt != c->attempt || s.at != phase::conditioning)
      return fx;
    if (s.ended) {
      finish(s, ended(s, fenced_result(s), now));
      fx.push_back(fx_report{});
      return fx;
    }
    if (!c->ok) {
      auto r = ended(s, result_of(s), now);
      r.outcome = msg::outcome::transient;
      r.error = "conditioning failed: " + c->error;
      finish(s, std::move(r));
      fx.push_back(fx_report{});
      return fx;
    }
    s.conditioning_s = c->encode_s;
    s.at = phase::sampling;
    s.sampling_started_at = now;
    s.progress_step = 0;
    s.progress_at = now;
    fx.push_back(fx_sample{*s.current, c->path});
  } else if (auto* d = std::get_if<ev_sampled>(&e)) {
    if (!s.current || s.current->attempt != d->attempt || s.at != phase::sampling)
      return fx;
    auto r = ended(s, result_of(s), now);
    r.outcome = d->outcome;
    r.error = d->error;
    r.latent_sha256 = d->sha256;
    r.latent_bytes = d->bytes;
    r.sampling_s = d->elapsed_s;
    r.cold = d->cold;
    r.model = d->model;
    r.model_identity = d->model_identity;
    r.bad_checkpoint = d->bad_checkpoint;
    if (s.stalled && r.outcome != msg::outcome::ok) {
      // Stopped by the watchdog: its "cancelled" (or whatever the call said as it was cut
      // short) is a hang, retried like a crash.
      r.outcome = msg::outcome::transient;
      r.error = "stalled: no step in " + std::to_string(static_cast<long long>(s.stall_s))
                + " s (after step " + std::to_string(s.progress_step) + "): "
                + (d->error.empty() ? std::string("stopped") : d->error);
    }
    if (r.outcome != msg::outcome::ok) {
      finish(s, std::move(r));  // no product: nothing to fence
    } else {
      s.at = phase::confirming;
      s.made = std::move(r);
      s.staged = d->staged;
      if (s.ended)
        discard(s, fx);
      else if (d->mono_s < s.lease_until)
        commit(s, fx);
      else
        fx.push_back(fx_log{3, "attempt " + std::to_string(d->attempt)
                                 + " sampled after its lease ran out: asking the coordinator "
                                   "before publishing the latent"});
    }
    fx.push_back(fx_report{});
  } else if (auto* g = std::get_if<ev_grant>(&e)) {
    if (g->grant.epoch != s.epoch || !s.current)
      return fx;
    const uint64_t a = s.current->attempt;
    if (has(g->grant.ended, a)) {
      s.ended = true;
      if (s.at == phase::confirming) {
        discard(s, fx);
        fx.push_back(fx_report{});
      }
      // Conditioning or sampling: dropped when it ends. The backend call is cut short only
      // when the user cancelled the job; an attempt merely given up on runs to its end.
      if (has(g->grant.cancelled, a) && s.at == phase::conditioning) {
        // Nothing of the pool's runs yet: the order is dropped now (the encoder's answer,
        // when it comes, is for an attempt no longer current and is ignored).
        auto r = ended(s, fenced_result(s), now);
        r.error = "cancelled";
        finish(s, std::move(r));
        fx.push_back(fx_report{});
        return fx;
      }
      if (has(g->grant.cancelled, a) && s.at == phase::sampling) {
        fx.push_back(fx_cancel_stage{a});
        fx.push_back(fx_log{2, "attempt " + std::to_string(a) + " of " + s.current->job.run_id
                                 + "/" + std::to_string(s.current->job.index)
                                 + " cancelled: stopping its sampler"});
      }
      return fx;
    }
    if (!has(g->grant.current, a))
      return fx;
    if (has(g->grant.preempt, a) && !s.preempting
        && (s.at == phase::conditioning || s.at == phase::sampling)) {
      s.preempting = true;
      fx.push_back(fx_preempt_stage{a});
      fx.push_back(fx_log{2, "attempt " + std::to_string(a) + " of " + s.current->job.run_id
                               + "/" + std::to_string(s.current->job.index)
                               + " asked to make way: checkpoint and stop at the next step"});
    }
    const double sent = s.reports.when(g->grant.seq);
    if (sent >= 0)
      s.lease_until =
        std::max(s.lease_until, sent + g->grant.lease_ms / 1000.0 * (1 - lease_margin));
    if (s.at == phase::confirming && g->mono_s < s.lease_until) {
      commit(s, fx);
      fx.push_back(fx_report{});
    }
  } else if (auto* k = std::get_if<ev_checkpoint>(&e)) {
    if (!s.current || s.current->attempt != k->attempt || s.at != phase::sampling)
      return fx;  // a late one: its file is released when the host reports it
    s.checkpoints.push_back(k->c);
    while (s.checkpoints.size() > checkpoints_reported)
      s.checkpoints.erase(s.checkpoints.begin());
    fx.push_back(fx_report{});  // the coordinator journals it now
  } else if (auto* p = std::get_if<ev_progress>(&e)) {
    if (!s.current || s.current->attempt != p->attempt || s.at != phase::sampling || s.stalled)
      return fx;
    if (p->step > s.progress_step) {
      s.progress_step = p->step;
      s.progress_at = now;
      s.stepping_workflows.insert(s.current->job.workflow);
      return fx;
    }
    if (!watched(s) || now - s.progress_at < s.stall_s)
      return fx;
    s.stalled = true;
    ++s.stalls;
    fx.push_back(fx_cancel_stage{p->attempt});
    fx.push_back(fx_log{3, "attempt " + std::to_string(p->attempt) + " of " + job_name(s)
                             + ": no step for " + std::to_string(static_cast<long long>(now - s.progress_at))
                             + " s (stall_timeout_s " + std::to_string(static_cast<long long>(s.stall_s))
                             + ", after step " + std::to_string(s.progress_step)
                             + "): the sampler is hung, stopping it"});
  } else if (auto* b = std::get_if<ev_budget>(&e)) {
    if (b->accepting != s.accepting) {
      s.accepting = b->accepting;
      fx.push_back(fx_report{});  // the coordinator learns it now, not at the next interval
    }
  } else if (auto* a = std::get_if<ev_ack>(&e)) {
    s.unacked.erase(std::remove_if(s.unacked.begin(), s.unacked.end(),
                                   [&](const msg::sample_result& r) {
                                     return r.attempt == a->attempt;
                                   }),
                    s.unacked.end());
  }
  return fx;
}

} // namespace vidline::actors::pool
