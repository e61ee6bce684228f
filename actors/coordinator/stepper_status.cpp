// The stepper (stepper.hpp): pools' and decoders' status reports.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/verdicts.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

namespace {

enum class report { stale, current, restarted };

/// Sorts a status report: stale (from a replaced epoch, or older than one already seen),
/// current, or the first of a new epoch (the actor restarted: the old epoch is retired).
template <class View>
report classify(View& v, uint64_t epoch, uint64_t seq) {
  if (v.retired.count(epoch) != 0)
    return report::stale;
  if (epoch == v.epoch) {
    if (seq != 0 && seq <= v.last_seq)
      return report::stale;
    v.last_seq = seq;
    return report::current;
  }
  if (v.epoch != 0)
    v.retired.insert(v.epoch);
  v.epoch = epoch;
  v.last_seq = seq;
  return report::restarted;
}

} // namespace

void stepper::on(const ev_pool_status& e) {
  auto it = s.pools.find(e.s.pool);
  if (it == s.pools.end()) {
    log(3, "status from unknown pool " + e.s.pool + " ignored");
    return;
  }
  auto& p = it->second;
  bool had_epoch = p.epoch != 0;
  auto kind = classify(p, e.s.epoch, e.s.seq);
  if (kind == report::stale)
    return;
  if (kind == report::restarted && had_epoch)
    pool_lost(p, "pool restarted");
  if (kind == report::restarted) {
    p.warm = false;
    p.speed_factor = 1;  // a restarted worker is observed afresh
    p.speed_observed = 0;
  }
  p.alive = host_up(p.host);
  p.accepting = e.s.accepting;
  p.reported_busy = e.s.busy_attempt;
  p.reported_model = e.s.model;
  p.reported_identity = e.s.model_identity;
  // A pool that loaded its model before any job (warm start) says so in its status: it is
  // warm for that model. Not for pools sharing GPUs, whose models others evict unseen.
  if (!p.warm && !e.s.model.empty() && e.s.busy_attempt == 0 && !p.assigned
      && p.conflicts.empty() && p.decoders_sharing.empty()) {
    p.warm = true;
    p.model = e.s.model;
  }
  p.last_status = now;
  if (p.assigned && e.s.busy_attempt != 0)
    if (auto* j = s.find_job(p.assigned->first, p.assigned->second);
        j != nullptr && j->attempt == e.s.busy_attempt) {
      j->running_attempt = e.s.busy_attempt;
      j->running_seen_at = now;
    }
  if (p.assigned && e.s.busy_attempt != 0 && e.s.steps > 0)
    if (auto* j = s.find_job(p.assigned->first, p.assigned->second);
        j != nullptr && j->attempt == e.s.busy_attempt) {
      j->progress_attempt = e.s.busy_attempt;
      j->progress_step = e.s.step;
      j->progress_steps = e.s.steps;
    }
  if (p.assigned && e.s.busy_attempt != 0 && !e.s.checkpoints.empty())
    if (auto* j = s.find_job(p.assigned->first, p.assigned->second);
        j != nullptr && j->attempt == e.s.busy_attempt && j->state == job_state::sampling)
      note_checkpoints(*j, e.s.checkpoints, p.kind);
  touch(p.name);
  for (auto& r : e.s.unacked)
    on_sample_result(r);
  // An order the pool has not shown (neither running nor finished) was lost on the way.
  if (p.assigned) {
    auto* j = s.find_job(p.assigned->first, p.assigned->second);
    if (j != nullptr && j->state == job_state::sampling && e.s.busy_attempt != j->attempt
        && now - j->order_sent_at >= s.p.order_resend_s)
      send_sample(p, *j);
  }
  const std::size_t before = fx.size();
  grant(p.host, "pool:" + p.name, e.s.epoch, e.s.seq,
        e.s.busy_attempt == 0 ? std::vector<uint64_t>{} : std::vector<uint64_t>{e.s.busy_attempt},
        [&](uint64_t a) -> job* {
          if (!p.assigned)
            return nullptr;
          auto* j = s.find_job(p.assigned->first, p.assigned->second);
          return j != nullptr && j->state == job_state::sampling && j->attempt == a
                     && j->pool == p.name
                   ? j
                   : nullptr;
        });
  // A preemption asked of the attempt is repeated in every grant while it runs.
  if (p.preempt_attempt != 0 && fx.size() > before)
    if (auto* g = std::get_if<fx_grant>(&fx.back()))
      if (std::find(g->grant.current.begin(), g->grant.current.end(), p.preempt_attempt)
          != g->grant.current.end())
        g->grant.preempt.push_back(p.preempt_attempt);
}

void stepper::note_checkpoints(job& j, const std::vector<msg::checkpoint_ref>& cs,
                               const std::string& kind) {
  bool changed = false;
  for (auto& c : cs)
    changed = note_checkpoint(j, c, kind, fx) || changed;
  if (changed)
    persist(j);
}

std::string stepper::kind_of(const std::string& pool) const {
  auto it = s.pools.find(pool);
  return it == s.pools.end() ? std::string() : it->second.kind;
}

void stepper::on(const ev_decoder_status& e) {
  auto it = s.decoders.find(e.s.decoder);
  if (it == s.decoders.end()) {
    log(3, "status from unknown decoder " + e.s.decoder + " ignored");
    return;
  }
  auto& d = it->second;
  bool had_epoch = d.epoch != 0;
  auto kind = classify(d, e.s.epoch, e.s.seq);
  if (kind == report::stale)
    return;
  if (kind == report::restarted && had_epoch)
    decoder_lost(d, "decoder restarted");
  d.alive = host_up(d.host);
  d.capacity = std::max<uint32_t>(1, std::min<uint32_t>(e.s.capacity, 2));
  d.last_status = now;
  d.pending = e.s.pending;
  d.fenced = e.s.fenced;
  d.unacked = static_cast<uint32_t>(e.s.unacked.size());
  d.holding = std::set<uint64_t>(e.s.holding.begin(), e.s.holding.end());
  for (auto& r : e.s.unacked)
    on_decode_result(r);
  // Orders now shown as held are no longer "on the way"; orders missing for too long
  // were lost and go again.
  for (auto o = d.ordered.begin(); o != d.ordered.end();) {
    if (d.holding.count(o->first)) {
      o = d.ordered.erase(o);
      continue;
    }
    ++o;
  }
  // An order neither held nor finished was lost on the way (or its decoder restarted
  // before taking it): after order_resend_s it goes again; the decoder ignores duplicates.
  for (auto* j : decoding_on(d.name))
    if (j->state == job_state::decoding && j->decoder == d.name
        && d.holding.count(j->attempt) == 0 && now - j->order_sent_at >= s.p.order_resend_s)
      send_decode(d, *j);
  std::map<uint64_t, job*> current;
  for (auto* j : decoding_on(d.name))
    if (j->state == job_state::decoding && j->decoder == d.name)
      current[j->attempt] = j;
  grant(d.host, "decoder:" + d.name, e.s.epoch, e.s.seq, e.s.holding, [&](uint64_t a) -> job* {
    auto it = current.find(a);
    return it == current.end() ? nullptr : it->second;
  });
  send_due_verdicts(s, d, now, fx);
}

void stepper::on(const ev_verdict_indexed& e) { apply_verdict_indexed(s, e, now, fx); }

} // namespace vidline::actors::coordinator
