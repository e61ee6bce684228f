// The auto policy (policy.hpp, auto_policy): per job, the pool that brings the batch's end
// soonest by the stage estimates, comparing layouts near the end of a batch (next, next_of)
// and keeping a pool for a size only it holds (reserved) (docs/planner.md, "auto"). Its
// per-size constants are in auto_policy_consts.cpp, its decoder choice in
// auto_policy_decoder.cpp; the simple policies and the list of names are in policy.cpp.
#include "actors/coordinator/auto_policy_detail.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace vidline::actors::coordinator {

using auto_detail::never;
using auto_detail::tie_s;

namespace {

/// A pool's slots in one scenario: it finishes jobs at first, first + period, ...
struct slots {
  double first = never;
  double period = never;
  std::size_t pos = 0;  ///< in the mode's order: breaks ties
};

/// How many of q's slots end before f (a tie counts when q comes first in the mode).
double count_before(const slots& q, double f, std::size_t pos) {
  if (q.first > f + tie_s)
    return 0;
  double k = std::floor((f - q.first) / q.period + tie_s / q.period);
  double last = q.first + k * q.period;
  double n = k + 1;
  if (std::abs(last - f) <= tie_s && q.pos > pos)
    n -= 1;
  return std::max(0.0, n);
}

/// How many slots end by T.
double count_by(const std::vector<slots>& ls, double T) {
  double n = 0;
  for (auto& q : ls)
    if (q.first <= T + tie_s)
      n += std::floor((T - q.first) / q.period + tie_s / q.period) + 1;
  return n;
}

/// When the q-th earliest slot ends: exactly, by bisection on the count.
double batch_end_exact(const std::vector<slots>& ls, std::size_t q) {
  double lo = never, hi = never;
  for (auto& s : ls) {
    if (s.first == never)
      continue;
    lo = std::min(lo, s.first);
    hi = std::min(hi, s.first + static_cast<double>(q - 1) * s.period);
  }
  if (hi == never)
    return never;
  // Precision relative to the span searched, not to the clock: a live coordinator's clock
  // reads ~1e10 s (wall time / time_scale).
  const double span = hi - lo;
  for (int i = 0; i < 100 && hi - lo > 1e-7 * std::max(1.0, span); ++i) {
    double mid = (lo + hi) / 2;
    if (count_by(ls, mid) >= static_cast<double>(q))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

/// The same as a fluid: pool p has done (T - first) / period + 1 jobs by T.
double batch_end_fluid(std::vector<slots> ls, std::size_t q) {
  ls.erase(std::remove_if(ls.begin(), ls.end(), [](const slots& s) { return s.first == never; }),
           ls.end());
  if (ls.empty())
    return never;
  std::sort(ls.begin(), ls.end(), [](const slots& a, const slots& b) { return a.first < b.first; });
  double rate = 0, weighted = 0;
  for (std::size_t k = 0; k < ls.size(); ++k) {
    rate += 1 / ls[k].period;
    weighted += ls[k].first / ls[k].period;
    double T = (static_cast<double>(q) - static_cast<double>(k + 1) + weighted) / rate;
    if (k + 1 == ls.size() || T <= ls[k + 1].first)
      return std::max(T, ls[k].first);
  }
  return never;
}

/// Whether a free pool's next job of the run would be warm: it holds the head's model, or
/// model affinity (stepper_dispatch.cpp, by_model) will give it a queued job of the model it
/// holds, of the head's size, instead of the head.
bool warm_next(const dispatch_view& v, const pool_view& p, const job& head) {
  if (warm_for(p, head.spec))
    return true;
  if (!p.warm || v.s.p.model_wait_s == 0)
    return false;
  auto m = v.queue.queued_by_model.find(p.model);
  if (m == v.queue.queued_by_model.end())
    return false;
  std::size_t looked = 0;
  for (uint32_t i : m->second) {
    if (++looked > 64)
      break;
    const job& k = v.r.jobs[i];
    if (k.spec.width == head.spec.width && k.spec.height == head.spec.height
        && k.spec.seconds == head.spec.seconds && pool_may_take(p, k))
      return true;
  }
  return false;
}

/// One pool of the mode, as the policy sees it for the run being dispatched.
struct line {
  const pool_view* p = nullptr;
  std::size_t pos = 0;
  bool usable = false;     ///< in service and holds the run's size
  bool free = false;       ///< free now
  bool busy = false;       ///< running an order now
  double busy_end = 0;     ///< when that order should end
  double cold_s = 0, warm_s = 0, tail_s = 0;
};

} // namespace

auto_policy::auto_policy(std::shared_ptr<const stage_estimates> est, auto_tuning t)
    : est_(std::move(est)), t_(t) {}

std::optional<assignment> auto_policy::next(const dispatch_view& v) const {
  const auto& q = v.queue;
  if (q.queued.empty() || !v.s.idx.mode_ids.count(v.r.mode))
    return std::nullopt;
  // The open runs of the mode share its pools: the slots to fill are the whole queue's
  // (this run's jobs go first when it is first in the queue; the machine asks it first).
  const std::size_t others = v.mode_queued > q.queued.size() ? v.mode_queued - q.queued.size() : 0;
  if (q.restricted.empty())
    return next_of(v, *q.queued.begin(), q.queued.size() + others, nullptr);
  // Jobs of several sizes (a shot list), or some that ran out of memory somewhere: each size
  // is a batch of alike jobs of its own, asked in the order of its lowest queued job (the
  // run's priority order); the first that gives a free pool a job wins. A pool that cannot
  // hold the lowest job is still asked for the others.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::size_t> class_of;
  std::vector<std::vector<uint32_t>> classes;
  for (uint32_t i : q.queued) {
    const auto& sp = v.r.jobs[i].spec;
    auto [it, fresh] = class_of.emplace(std::make_tuple(sp.width, sp.height, sp.seconds),
                                        classes.size());
    if (fresh)
      classes.emplace_back();
    classes[it->second].push_back(i);
  }
  // A pool that alone holds some queued size (in the layout as it runs) keeps to it once
  // that size would otherwise end after the rest of the queue (reserved()).
  for (std::size_t ci = 0; ci < classes.size(); ++ci)
    if (auto a = next_of(v, classes[ci].front(), classes[ci].size() + others, &classes[ci]))
      return reserved(v, *a, classes, ci).value_or(*a);
  return std::nullopt;
}

std::optional<assignment> auto_policy::reserved(const dispatch_view& v, const assignment& a,
                                                const std::vector<std::vector<uint32_t>>& classes,
                                                std::size_t taken) const {
  const auto& idx = v.s.idx;
  const auto& ids = idx.mode_ids.at(v.r.mode);
  if (ids.size() > t_.exact_pools)
    return std::nullopt;
  const pool_view& p = v.pool(a.pool);
  // The line as it runs now: pools busy, or free and holding a model, in service. A pool
  // whose GPUs a busy neighbour holds is not part of it (it would need a layout switch).
  auto busy = [&](const pool_view& q) { return q.assigned.has_value() || q.reported_busy != 0; };
  std::vector<uint32_t> line;
  for (uint32_t id : ids) {
    const pool_view& q = v.pool(id);
    if (id == a.pool || idx.unavailable_flag[id] || !(busy(q) || q.warm))
      continue;
    bool held = false;
    for (uint32_t o : idx.related[id])
      held = held || (o != id && busy(v.pool(o)));
    if (!held || busy(q))
      line.push_back(id);
  }
  if (line.empty())
    return std::nullopt;
  // A job on q: its prompt conditioned, then sampled (as q was observed to run).
  auto job_s = [&](const pool_view& q, const msg::job_spec& sp,
                   bool cold) -> std::optional<double> {
    auto sm = est_->sampling(q.kind, sp, cold);
    if (!sm)
      return std::nullopt;
    return est_->conditioning(q.host) + *sm * q.speed_factor;
  };
  // The sizes only p holds of that line, and p's work on them.
  double own = 0;
  std::optional<uint32_t> first_own;
  std::vector<std::size_t> shared;
  for (std::size_t ci = 0; ci < classes.size(); ++ci) {
    const job& head = v.r.jobs[classes[ci].front()];
    bool others = false;
    for (uint32_t id : line)
      others = others
               || (pool_may_take(v.pool(id), head) && est_->sampling(v.pool(id).kind, head.spec, false));
    if (others) {
      shared.push_back(ci);
      continue;
    }
    if (ci == taken)
      return std::nullopt;  // p was given a job of a size only it holds: nothing to keep
    auto t = job_s(p, head.spec, false);
    if (!t || !pool_may_take(p, head))
      continue;
    own += *t * static_cast<double>(classes[ci].size());
    if (!first_own || classes[ci].front() < *first_own)
      first_own = classes[ci].front();
  }
  if (!first_own)
    return std::nullopt;
  // When the line, p included, is through the queue: a fluid of pool-seconds (the jobs it
  // runs now, p's own sizes on p, each other size at the mean time of the pools that hold
  // it) shared out over the pools. Taking `a` first must not end p's own sizes after that.
  double work = own;
  for (uint32_t id : line) {
    const pool_view& q = v.pool(id);
    if (!q.assigned)
      continue;
    const run* r = v.s.find_run(q.assigned->first);
    if (r == nullptr || q.assigned->second >= r->jobs.size())
      continue;
    const auto& sp = r->jobs[q.assigned->second].spec;
    if (auto t = job_s(q, sp, !warm_for(q, sp)))
      work += std::max(0.0, q.ordered_at + *t - v.now);
  }
  for (std::size_t ci : shared) {
    const job& head = v.r.jobs[classes[ci].front()];
    double rate = 0, holders = 0;
    auto add = [&](const pool_view& q) {
      if (pool_may_take(q, head))
        if (auto t = job_s(q, head.spec, false)) {
          rate += 1 / std::max(*t, 1e-6);
          holders += 1;
        }
    };
    add(p);
    for (uint32_t id : line)
      add(v.pool(id));
    if (rate > 0)
      work += static_cast<double>(classes[ci].size()) * holders / rate;
  }
  const double rest = v.now + work / static_cast<double>(line.size() + 1);
  const job& given = v.r.jobs[a.job];
  auto t = job_s(p, given.spec, !warm_for(p, given.spec));
  if (!t || v.now + *t + own <= rest)
    return std::nullopt;
  return assignment{*first_own, a.pool};
}

std::optional<assignment> auto_policy::next_of(const dispatch_view& v, uint32_t head_index,
                                               std::size_t Q,
                                               const std::vector<uint32_t>* members) const {
  const auto& q = v.queue;
  const job& head = v.r.jobs[head_index];
  const mode_consts& c = consts(v.s, v.r.mode, head.spec);
  const auto& ids = c.ids;
  const std::size_t n = ids.size();
  const auto& idx = v.s.idx;

  auto cond_ready = [&](std::size_t k, double t) {
    auto first = q.first_order_on_host.find(v.pool(ids[k]).host);
    return first == q.first_order_on_host.end() ? t + c.cond_s[k]
                                                : std::max(t, first->second + c.cond_s[k]);
  };

  // Many jobs queued, no GPUs shared: the free pool that finishes one soonest takes it when
  // even every pool working flat out could not finish all queued jobs before it would.
  if (c.groups.empty()) {
    const auto& pos = idx.mode_pos.at(v.r.mode);
    double best_f = never;
    std::size_t best = 0;
    for (uint32_t id : v.free) {
      int32_t k = pos[id];
      if (k < 0 || !c.fits[k] || idx.unavailable_flag[id] || !pool_may_take(v.pool(id), head))
        continue;
      const auto& p = v.pool(id);
      double f = cond_ready(k, v.now)
                 + (warm_next(v, p, head) ? c.warm_s[k] : c.cold_s[k]) * p.speed_factor + c.tail_s[k];
      if (f < best_f || (f == best_f && static_cast<std::size_t>(k) < best)) {
        best_f = f;
        best = static_cast<std::size_t>(k);
      }
    }
    if (best_f == never)
      return std::nullopt;
    // The pools' warm rate as observed (their speed factors; the constant when all are 1).
    double warm_rate = 0;
    bool observed = false;
    for (std::size_t k = 0; k < n; ++k)
      if (c.fits[k]) {
        double f = v.pool(ids[k]).speed_factor;
        observed = observed || f != 1;
        warm_rate += 1 / std::max(c.warm_s[k] * f, 1e-6);
      }
    if (!observed)
      warm_rate = c.warm_rate;
    double at_most_before = (best_f - v.now) * warm_rate + static_cast<double>(c.fitting);
    if (static_cast<double>(Q) > at_most_before)
      return assignment{head_index, ids[best]};
  }

  // Every pool of the mode: usable now, free, busy until when.
  std::vector<line> lines(n);
  for (std::size_t k = 0; k < n; ++k) {
    line& l = lines[k];
    l.p = &v.pool(ids[k]);
    l.pos = k;
    l.usable = c.fits[k] && !idx.unavailable_flag[ids[k]] && pool_may_take(*l.p, head);
    if (!l.usable)
      continue;
    // Sampling as this pool was observed to run it (pool_view::speed_factor).
    l.cold_s = c.cold_s[k] * l.p->speed_factor;
    l.warm_s = std::max(c.warm_s[k] * l.p->speed_factor, 1e-6);
    l.tail_s = c.tail_s[k];
    l.free = idx.free_flag[ids[k]] != 0;
    if (l.p->assigned) {
      l.busy = true;
      double end = v.now + l.warm_s;
      bool was_cold = !l.p->warm;
      if (const run* ar = v.s.find_run(l.p->assigned->first);
          ar != nullptr && l.p->assigned->second < ar->jobs.size())
        was_cold = !warm_for(*l.p, ar->jobs[l.p->assigned->second].spec);
      if (l.p->assigned->first == v.r.id) {
        // Its own job's size, not the head's: a shot list runs several sizes at once.
        double sm = was_cold ? l.cold_s : l.warm_s;
        if (l.p->assigned->second < v.r.jobs.size())
          if (auto s = est_->sampling(l.p->kind, v.r.jobs[l.p->assigned->second].spec, was_cold))
            sm = *s * l.p->speed_factor;
        end = cond_ready(k, l.p->ordered_at) + sm;
      } else if (const run* r = v.s.find_run(l.p->assigned->first);
                 r != nullptr && l.p->assigned->second < r->jobs.size()) {
        if (auto s = est_->sampling(l.p->kind, r->jobs[l.p->assigned->second].spec, was_cold))
          end = l.p->ordered_at + *s * l.p->speed_factor;
      }
      l.busy_end = std::max(end, v.now);
    } else if (l.p->reported_busy != 0) {
      l.busy = true;  // an attempt we no longer track: guess one warm job
      l.busy_end = v.now + l.warm_s;
    }
  }

  // A pool's slots: after its current order, or from when its GPUs are free.
  auto slots_of = [&](std::size_t k, double gpus_free_at) {
    const line& l = lines[k];
    slots s;
    s.pos = k;
    s.period = l.warm_s;
    if (l.busy)
      s.first = l.busy_end + l.warm_s + l.tail_s;
    else
      s.first = cond_ready(k, std::max(v.now, gpus_free_at))
                + (warm_next(v, *l.p, head) ? l.warm_s : l.cold_s) + l.tail_s;
    return s;
  };
  // As things stand: busy and free pools go on; pools held back by a busy neighbour don't.
  std::vector<slots> chosen(n);
  for (std::size_t k = 0; k < n; ++k)
    if (lines[k].usable && (lines[k].busy || lines[k].free))
      chosen[k] = slots_of(k, v.now);

  // Near the end of a batch the decoders' queue decides: pools that deliver at once wait
  // for each other's decodes. What the decoders have now: when each is through the latents
  // it holds or has on the way; the latents of this run that pools sample now.
  const bool queue_model = Q <= t_.queue_jobs && n <= t_.exact_pools && !c.decoders.empty();
  std::vector<double> decoder_free;
  std::vector<std::pair<double, std::size_t>> sampling_now;  // (latent ready, pool)
  if (queue_model) {
    for (std::size_t d = 0; d < c.decoders.size(); ++d) {
      const auto* dv = c.decoders[d];
      double free_at = -never;
      if (!dv->alive || dv->drained || c.decoder_shared[d]) {
        decoder_free.push_back(never);
        continue;
      }
      for (auto& [attempt, t] : dv->sent)  // attempts go out in order: oldest first
        free_at = std::max(free_at, t + c.handoff_remote_s[d]) + c.decode_s[d];
      decoder_free.push_back(std::max(free_at, v.now));
    }
    for (std::size_t k = 0; k < n; ++k)
      if (lines[k].usable && lines[k].busy && lines[k].p->assigned
          && lines[k].p->assigned->first == v.r.id)
        sampling_now.emplace_back(lines[k].busy_end, k);
  }
  // The batch's end with the Q earliest slots' latents put through the decoders in the
  // order they are sampled, each to the decoder that writes it first.
  auto queued_end = [&](const std::vector<slots>& ls, double sampled_by) {
    std::vector<std::pair<double, std::size_t>> next;  // (slot end, pool)
    for (std::size_t k = 0; k < ls.size(); ++k)
      if (ls[k].first != never)
        for (double t = ls[k].first; t <= sampled_by + tie_s; t += ls[k].period)
          next.emplace_back(t, k);
    std::sort(next.begin(), next.end());
    if (next.size() > Q)
      next.resize(Q);
    std::vector<std::pair<double, std::size_t>> latents = sampling_now;  // (ready, pool)
    for (auto& [t, k] : next)
      latents.emplace_back(t - lines[k].tail_s, k);
    std::sort(latents.begin(), latents.end());
    std::vector<double> free_at = decoder_free;
    double T = v.now;
    for (auto& [ready, k] : latents) {
      double best = never;
      std::size_t bd = 0;
      const std::string& host = lines[k].p->host;
      for (std::size_t d = 0; d < free_at.size(); ++d) {
        double h = host == c.decoders[d]->host ? c.handoff_local_s[d] : c.handoff_remote_s[d];
        double end = std::max(ready + h, free_at[d]) + c.decode_s[d];
        if (end < best - tie_s) {
          best = end;
          bd = d;
        }
      }
      if (best == never)
        return never;
      free_at[bd] = best;
      T = std::max(T, best);
    }
    return T;
  };
  auto batch_end = [&](const std::vector<slots>& ls) {
    double T = ls.size() <= t_.exact_pools ? batch_end_exact(ls, Q) : batch_end_fluid(ls, Q);
    if (queue_model && T != never)
      T = std::max(T, queued_end(ls, T));
    if (c.decode_rate > 0)
      T = std::max(T, v.now + static_cast<double>(q.unfinished) / c.decode_rate);
    return T;
  };

  // Layouts. Each group starts from its current layout (the fastest holding its busy, else
  // its warm pools; the fastest of all when it has neither). Then each group with a free
  // pool takes the layout that ends the batch first, the others' fixed, but keeps its
  // current one unless another is better by the switch margin: a switch costs model loads
  // now and is judged on a forecast, and switching back and forth costs twice.
  auto related = [&](std::size_t a, std::size_t b) {
    const auto& r = idx.related[ids[a]];
    return std::binary_search(r.begin(), r.end(), ids[b]);
  };
  // Under a layout its pools run (after busy neighbours free their GPUs); the others finish
  // what they run and stop.
  auto apply = [&](const mode_consts::group& g, uint32_t mask, std::vector<slots>& out) {
    const std::size_t k = g.members.size();
    for (std::size_t a = 0; a < k; ++a) {
      std::size_t m = g.members[a];
      if (!(mask >> a & 1) || !lines[m].usable) {
        out[m] = slots{};
        continue;
      }
      double gpus_free_at = v.now;
      for (std::size_t b = 0; b < k; ++b)
        if (lines[g.members[b]].busy && related(m, g.members[b]))
          gpus_free_at = std::max(gpus_free_at, lines[g.members[b]].busy_end);
      out[m] = slots_of(m, gpus_free_at);
    }
  };
  auto rate_of = [&](const mode_consts::group& g, uint32_t mask) {
    double r = 0;
    for (std::size_t a = 0; a < g.members.size(); ++a)
      if ((mask >> a & 1) && lines[g.members[a]].usable)
        r += 1 / lines[g.members[a]].warm_s;
    return r;
  };
  std::vector<uint32_t> picked(c.groups.size(), 0), kept(c.groups.size(), 0);
  for (std::size_t gi = 0; gi < c.groups.size(); ++gi) {
    const auto& g = c.groups[gi];
    uint32_t busy = 0, warm = 0;
    for (std::size_t a = 0; a < g.members.size(); ++a) {
      const line& l = lines[g.members[a]];
      if (l.busy)
        busy |= 1u << a;
      if (l.usable && warm_next(v, *l.p, head))
        warm |= 1u << a;
    }
    kept[gi] = busy != 0 ? busy : warm;
    double best_rate = -1;
    for (uint32_t mask : g.layouts)
      if ((mask & kept[gi]) == kept[gi] && rate_of(g, mask) > best_rate + 1e-12) {
        best_rate = rate_of(g, mask);
        picked[gi] = mask;
      }
    if (picked[gi] != 0)
      apply(g, picked[gi], chosen);
  }
  for (std::size_t gi = 0; gi < c.groups.size(); ++gi) {
    const auto& g = c.groups[gi];
    if (std::none_of(g.members.begin(), g.members.end(),
                     [&](std::size_t m) { return lines[m].usable && lines[m].free; }))
      continue;
    double best_T = never, current_T = never;
    uint32_t best = 0;
    std::vector<slots> trial = chosen;
    for (uint32_t mask : g.layouts) {
      apply(g, mask, trial);
      double T = batch_end(trial);
      if (T < best_T - tie_s || (T <= best_T + tie_s && best != 0 && rate_of(g, mask) > rate_of(g, best))) {
        best_T = std::min(best_T, T);
        best = mask;
      }
      if (kept[gi] != 0 && mask == picked[gi])
        current_T = T;
    }
    uint32_t pick = best;
    if (kept[gi] != 0 && picked[gi] != 0
        && current_T
             <= best_T + std::max(t_.switch_margin_s, t_.switch_margin * (best_T - v.now)))
      pick = picked[gi];
    if (pick == 0)
      continue;
    picked[gi] = pick;
    apply(g, pick, chosen);
  }
  std::vector<char> enabled(n, 1);
  for (std::size_t gi = 0; gi < c.groups.size(); ++gi)
    if (picked[gi] != 0)
      for (std::size_t a = 0; a < c.groups[gi].members.size(); ++a)
        enabled[c.groups[gi].members[a]] = (picked[gi] >> a & 1) != 0;

  // The free, enabled pool whose next slot ends first takes a job if that slot is among
  // the Q earliest; if it is not, no later one is either.
  std::vector<std::size_t> candidates;
  for (std::size_t k = 0; k < n; ++k)
    if (lines[k].usable && lines[k].free && enabled[k] && chosen[k].first != never)
      candidates.push_back(k);
  std::sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(chosen[a].first, a) < std::tie(chosen[b].first, b);
  });
  for (std::size_t cand : candidates) {
    double f = chosen[cand].first;
    double earlier = 0;
    for (std::size_t k = 0; k < n && earlier < static_cast<double>(Q); ++k)
      if (k != cand && chosen[k].first != never)
        earlier += count_before(chosen[k], f, cand);
    if (earlier >= static_cast<double>(Q))
      return std::nullopt;
    if (members != nullptr) {
      for (uint32_t i : *members)
        if (pool_may_take(*lines[cand].p, v.r.jobs[i]))
          return assignment{i, ids[cand]};
    } else {
      for (uint32_t i : q.queued)
        if (pool_may_take(*lines[cand].p, v.r.jobs[i]))
          return assignment{i, ids[cand]};
    }
  }
  return std::nullopt;
}

} // namespace vidline::actors::coordinator
