#include "actors/coordinator/policy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace vidline::sched {
namespace {

constexpr double never = std::numeric_limits<double>::infinity();
constexpr double tie_s = 1e-9;  ///< two finishes closer than this are a tie (broken by mode order)

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
  for (int i = 0; i < 100 && hi - lo > 1e-7 * std::max(1.0, hi); ++i) {
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

/// One pool of the mode, as the policy sees it for the run being dispatched.
struct line {
  const pool_view* p = nullptr;
  std::size_t pos = 0;
  bool usable = false;     ///< in service and holds the run's size
  bool free = false;       ///< free now
  bool busy = false;       ///< running an order now
  double busy_end = 0;     ///< when that order should end
  double cold_s = 0, warm_s = 0, tail_s = 0;
  double cond_s = 0;       ///< conditioning on its host, if not started yet for this run
  int group = -1;
};

} // namespace

auto_policy::auto_policy(std::shared_ptr<const stage_estimates> est, auto_tuning t)
    : est_(std::move(est)), t_(t) {}

std::optional<assignment> auto_policy::next(const dispatch_view& v) const {
  const auto& q = v.queue;
  if (q.queued.empty())
    return std::nullopt;
  const std::size_t Q = q.queued.size();
  const job& head = v.r.jobs[*q.queued.begin()];
  auto mode = v.s.modes.find(v.r.mode);
  if (mode == v.s.modes.end())
    return std::nullopt;
  const auto& names = mode->second;

  // Decoders of the mode: the best handoff + decode per host, and their joint rate.
  std::vector<const decoder_view*> decs;
  if (auto md = v.s.mode_decoders.find(v.r.mode); md != v.s.mode_decoders.end())
    for (auto& n : md->second)
      if (auto d = v.s.decoders.find(n); d != v.s.decoders.end())
        decs.push_back(&d->second);
  double decode_rate = 0;
  for (auto* d : decs)
    decode_rate += 1 / std::max(1e-9, est_->decode(*d, head.spec));
  std::map<std::string, double> tail_of_host;
  auto tail = [&](const std::string& host) {
    auto [it, fresh] = tail_of_host.emplace(host, 0.0);
    if (fresh) {
      double best = decs.empty() ? 0 : never;
      for (auto* d : decs)
        best = std::min(best, est_->handoff(host, *d, head.spec) + est_->decode(*d, head.spec));
      it->second = best;
    }
    return it->second;
  };
  auto cond_ready = [&](const line& l, double t) {
    auto first = q.first_order_on_host.find(l.p->host);
    return first == q.first_order_on_host.end()
             ? t + l.cond_s
             : std::max(t, first->second + est_->conditioning(l.p->host));
  };

  // Every pool of the mode.
  std::vector<line> lines(names.size());
  std::map<std::string, std::size_t> at;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto it = v.s.pools.find(names[i]);
    if (it == v.s.pools.end() || !at.emplace(names[i], i).second)
      continue;
    line& l = lines[i];
    l.p = &it->second;
    l.pos = i;
    auto cold = est_->sampling(l.p->kind, head.spec, true);
    auto warm = est_->sampling(l.p->kind, head.spec, false);
    l.usable = cold && warm && v.s.idx.unavailable.count(names[i]) == 0
               && pool_may_take(*l.p, head);
    if (!l.usable)
      continue;
    l.cold_s = *cold;
    l.warm_s = std::max(*warm, 1e-6);
    l.tail_s = tail(l.p->host);
    l.cond_s = est_->conditioning(l.p->host);
    l.free = std::find(v.free.begin(), v.free.end(), names[i]) != v.free.end();
    if (l.p->assigned) {
      l.busy = true;
      double end = v.now + l.warm_s;
      if (const run* r = v.s.find_run(l.p->assigned->first);
          r != nullptr && l.p->assigned->second < r->jobs.size()) {
        const auto& spec = r->jobs[l.p->assigned->second].spec;
        bool was_cold = !l.p->warm;
        if (auto s = est_->sampling(l.p->kind, spec, was_cold)) {
          auto first = q.first_order_on_host.find(l.p->host);
          double start = std::max(l.p->ordered_at, first == q.first_order_on_host.end()
                                                      ? l.p->ordered_at
                                                      : first->second + est_->conditioning(l.p->host));
          end = start + *s;
        }
      }
      l.busy_end = std::max(end, v.now);
    } else if (l.p->reported_busy != 0) {
      l.busy = true;  // an attempt we no longer track: guess one warm job
      l.busy_end = v.now + l.warm_s;
    }
  }

  // Conflict groups among usable pools.
  std::vector<int> parent(lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i)
    parent[i] = static_cast<int>(i);
  auto find = [&](int i) {
    while (parent[i] != i)
      i = parent[i] = parent[parent[i]];
    return i;
  };
  auto conflict = [&](std::size_t a, std::size_t b) {
    return lines[a].p->conflicts.count(lines[b].p->name) != 0
           || lines[b].p->conflicts.count(lines[a].p->name) != 0;
  };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].usable)
      continue;
    for (auto& other : lines[i].p->conflicts) {
      auto j = at.find(other);
      if (j != at.end() && lines[j->second].usable)
        parent[find(static_cast<int>(i))] = find(static_cast<int>(j->second));
    }
  }
  std::map<int, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].usable)
      groups[find(static_cast<int>(i))].push_back(i);

  // A pool's slots: after its current order, or from when its GPUs are free.
  auto slots_of = [&](std::size_t i, double gpus_free_at) {
    const line& l = lines[i];
    slots s;
    s.pos = l.pos;
    s.period = l.warm_s;
    if (l.busy)
      s.first = l.busy_end + l.warm_s + l.tail_s;
    else
      s.first = cond_ready(l, std::max(v.now, gpus_free_at)) + (l.p->warm ? l.warm_s : l.cold_s)
                + l.tail_s;
    return s;
  };
  // As things stand: busy and free pools go on; pools held back by a busy neighbour don't.
  std::vector<slots> as_is(lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].usable && (lines[i].busy || lines[i].free))
      as_is[i] = slots_of(i, v.now);

  auto batch_end = [&](const std::vector<slots>& ls) {
    double T = ls.size() <= t_.exact_pools ? batch_end_exact(ls, Q) : batch_end_fluid(ls, Q);
    if (decode_rate > 0)
      T = std::max(T, v.now + static_cast<double>(q.unfinished) / decode_rate);
    return T;
  };

  // Layouts of groups with a free pool.
  std::vector<slots> chosen = as_is;
  std::vector<bool> enabled(lines.size(), true);
  for (auto& [root, members] : groups) {
    if (members.size() < 2 || members.size() > t_.max_group)
      continue;
    bool has_free = std::any_of(members.begin(), members.end(),
                                [&](std::size_t i) { return lines[i].free; });
    if (!has_free)
      continue;
    const std::size_t k = members.size();
    std::vector<uint32_t> layouts;
    for (uint32_t mask = 1; mask < (1u << k); ++mask) {
      bool ok = true;
      for (std::size_t a = 0; a < k && ok; ++a)
        for (std::size_t b = a + 1; b < k && ok; ++b)
          if ((mask >> a & 1) && (mask >> b & 1) && conflict(members[a], members[b]))
            ok = false;
      for (std::size_t a = 0; a < k && ok; ++a) {
        if (mask >> a & 1)
          continue;
        bool addable = true;
        for (std::size_t b = 0; b < k && addable; ++b)
          if ((mask >> b & 1) && conflict(members[a], members[b]))
            addable = false;
        if (addable)
          ok = false;  // not maximal
      }
      if (ok)
        layouts.push_back(mask);
    }
    double best_T = never, current_T = never;
    uint32_t best = 0, current = 0;
    uint32_t busy_mask = 0, warm_mask = 0;
    for (std::size_t a = 0; a < k; ++a) {
      if (lines[members[a]].busy)
        busy_mask |= 1u << a;
      if (lines[members[a]].p->warm)
        warm_mask |= 1u << a;
    }
    uint32_t keep = busy_mask != 0 ? busy_mask : warm_mask;
    std::vector<slots> trial = chosen;
    // Under a layout, its pools run (after busy neighbours free their GPUs); the others
    // finish what they run and stop.
    auto apply = [&](uint32_t mask, std::vector<slots>& out) {
      for (std::size_t a = 0; a < k; ++a) {
        std::size_t i = members[a];
        if (!(mask >> a & 1)) {
          out[i] = slots{};
          continue;
        }
        double gpus_free_at = v.now;
        for (std::size_t b = 0; b < k; ++b)
          if (lines[members[b]].busy && conflict(i, members[b]))
            gpus_free_at = std::max(gpus_free_at, lines[members[b]].busy_end);
        out[i] = slots_of(i, gpus_free_at);
      }
    };
    for (uint32_t mask : layouts) {
      apply(mask, trial);
      double T = batch_end(trial);
      if (T < best_T - tie_s) {
        best_T = T;
        best = mask;
      }
      if (keep != 0 && (mask & keep) == keep && T < current_T - tie_s) {
        current_T = T;
        current = mask;
      }
    }
    uint32_t pick = best;
    if (current != 0
        && current_T <= best_T + std::max(t_.switch_margin_s, t_.switch_margin * best_T))
      pick = current;
    apply(pick, chosen);
    for (std::size_t a = 0; a < k; ++a)
      enabled[members[a]] = (pick >> a & 1) != 0;
  }

  // The free, enabled pool whose next slot ends first takes a job if that slot is among
  // the Q earliest; if it is not, no later one is either.
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].usable && lines[i].free && enabled[i] && chosen[i].first != never)
      candidates.push_back(i);
  std::sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(chosen[a].first, lines[a].pos) < std::tie(chosen[b].first, lines[b].pos);
  });
  for (std::size_t c : candidates) {
    double f = chosen[c].first;
    double earlier = 0;
    for (std::size_t i = 0; i < lines.size() && earlier < static_cast<double>(Q); ++i)
      if (i != c && chosen[i].first != never)
        earlier += count_before(chosen[i], f, lines[c].pos);
    if (earlier >= static_cast<double>(Q))
      return std::nullopt;
    for (uint32_t i : q.queued)
      if (pool_may_take(*lines[c].p, v.r.jobs[i]))
        return assignment{i, lines[c].p->name};
  }
  return std::nullopt;
}

std::shared_ptr<const dispatch_policy> make_policy(const std::string& name,
                                                   std::shared_ptr<const stage_estimates> est) {
  if (name == "in_turn")
    return std::make_shared<in_turn_policy>();
  if (name == "first_free")
    return std::make_shared<first_free_policy>();
  if (name == "auto" && est)
    return std::make_shared<auto_policy>(std::move(est));
  return nullptr;
}

} // namespace vidline::sched
