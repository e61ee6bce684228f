#include "actors/coordinator/preempt.hpp"

#include "actors/coordinator/checkpoints.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {
namespace {

/// A sampling job that may be asked to make way now (see preempt.hpp), and when its
/// newest checkpoint was saved.
struct candidate {
  pool_view* pool = nullptr;
  job* j = nullptr;
  int32_t priority = 0;
  double saved_at = -1;
};

/// Whether a queued job of run `rp` (not waiting out a backoff) may be held by pool `p`.
bool wanted(const state& s, std::size_t rp, const pool_view& p) {
  const auto& r = s.runs[rp];
  for (uint32_t i : s.idx.runs[rp].queued)
    if (pool_may_take(p, r.jobs[i]))
      return true;
  return false;
}

} // namespace

void preempt_for_queue(state& s, double now, std::vector<effect>& fx) {
  if (s.p.preempt_priority_gap <= 0)
    return;
  // The first run in dispatch order with queued jobs: the highest priority waiting.
  for (std::size_t rp : s.idx.run_order) {
    const run& high = s.runs[rp];
    if (high.done || s.idx.runs[rp].queued.empty())
      continue;
    auto mode = s.modes.find(high.mode);
    if (mode == s.modes.end())
      return;
    std::size_t asked = 0;  // pools of the mode already making way
    std::vector<candidate> cands;
    for (auto& name : mode->second) {
      auto it = s.pools.find(name);
      if (it == s.pools.end() || !it->second.assigned)
        continue;
      pool_view& p = it->second;
      if (p.preempt_attempt != 0) {
        ++asked;
        continue;
      }
      job* j = s.find_job(p.assigned->first, p.assigned->second);
      const run* low = s.find_run(p.assigned->first);
      if (j == nullptr || low == nullptr || j->state != job_state::sampling || !p.alive
          || j->pool != p.name || high.priority - low->priority < s.p.preempt_priority_gap)
        continue;
      const double saved = kept_until(s, *j);
      // A report's way to here (at most about a resend interval) on top of the interval.
      if (saved < 0 || now - saved > s.p.checkpoint_interval_s + s.p.order_resend_s)
        continue;  // no recent checkpoint: stopping it would lose its work
      const double stage = s.policy_of(low->mode)
                             .expected_sampling(p.kind, j->spec, false)
                             .value_or(default_model_wait_s);
      if (j->preempt_asked_at >= 0 && now - j->preempt_asked_at < stage)
        continue;  // asked once within its stage time already
      if (!wanted(s, rp, p))
        continue;
      cands.push_back({&p, j, low->priority, saved});
    }
    const std::size_t queued = s.idx.runs[rp].queued.size();
    // The lowest priority first, then the freshest checkpoint (the least work redone).
    std::sort(cands.begin(), cands.end(), [](const candidate& a, const candidate& b) {
      return a.priority != b.priority ? a.priority < b.priority : a.saved_at > b.saved_at;
    });
    for (auto& c : cands) {
      if (asked >= queued)
        break;
      ++asked;
      c.pool->preempt_attempt = c.j->attempt;
      c.j->preempt_asked_at = now;
      msg::lease_grant g;
      g.target = c.pool->name;
      g.epoch = c.pool->epoch;
      g.seq = c.pool->last_seq;
      g.lease_ms = static_cast<uint64_t>(s.p.lease_s * 1000);
      g.current.push_back(c.j->attempt);
      g.preempt.push_back(c.j->attempt);
      fx.push_back(fx_grant{c.pool->host, "pool:" + c.pool->name, std::move(g)});
      fx.push_back(fx_log{2, "job " + c.j->spec.run_id + "/" + std::to_string(c.j->spec.index)
                               + " on pool " + c.pool->name + " asked to checkpoint and stop: run "
                               + high.id + " (priority " + std::to_string(high.priority)
                               + ") waits"});
    }
    return;
  }
}

} // namespace vidline::actors::coordinator
