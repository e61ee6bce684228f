// The simple dispatch policies (policy.hpp): the default decoder choice, first_free and
// in_turn, and make_policy, which knows every policy name (policy_names). The auto policy
// is in auto_policy*.cpp.
#include "actors/coordinator/policy.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

// -- dispatch policies -------------------------------------------------------------------------

decoder_view* dispatch_policy::pick_decoder(const state& s, const run&, const job&,
                                            const std::vector<decoder_view*>& decoders,
                                            double) const {
  decoder_view* best = nullptr;
  uint32_t best_credits = 0;
  for (auto* d : decoders) {
    if (!d->alive || d->drained || decoder_blocked(s, *d))
      continue;
    uint32_t c = d->credits();
    if (c > best_credits) {
      best = d;
      best_credits = c;
    }
  }
  return best;
}

std::optional<assignment> first_free_policy::next(const dispatch_view& v) const {
  auto pool_for = [&](uint32_t i) -> std::optional<assignment> {
    const job& j = v.r.jobs[i];
    for (uint32_t id : v.free)
      if (pool_may_take(v.pool(id), j))
        return assignment{i, id};
    return std::nullopt;
  };
  // The lowest queued job some free pool may take, with the first such pool. Unrestricted
  // jobs are alike: only the lowest of them needs asking.
  std::optional<uint32_t> plain;
  for (uint32_t i : v.queue.queued)
    if (v.queue.restricted.count(i) == 0) {
      plain = i;
      break;
    }
  bool plain_asked = false;
  for (uint32_t i : v.queue.restricted) {
    if (plain && !plain_asked && *plain < i) {
      plain_asked = true;
      if (auto a = pool_for(*plain))
        return a;
    }
    if (auto a = pool_for(i))
      return a;
  }
  if (plain && !plain_asked)
    return pool_for(*plain);
  return std::nullopt;
}

std::optional<assignment> in_turn_policy::next(const dispatch_view& v) const {
  const auto& q = v.queue;
  const auto& idx = v.s.idx;
  std::optional<assignment> best;
  auto consider = [&](uint32_t i, uint32_t pool) {
    if (!best || i < best->job)
      best = assignment{i, pool};
  };
  auto first_free_for = [&](const job& j) -> std::optional<uint32_t> {
    for (uint32_t id : v.free)
      if (pool_may_take(v.pool(id), j))
        return id;
    return std::nullopt;
  };
  // A home pool given up on: down or away, or silent since the run came in.
  auto given_up = [&](uint32_t id) {
    if (!idx.unavailable_flag[id])
      return false;
    const auto& p = v.pool(id);
    return p.epoch != 0 || !v.s.host_up(p.host) || v.now - v.r.submitted_at >= v.s.p.home_wait_s;
  };
  // Each free pool takes the lowest job of its own turn.
  for (uint32_t id : v.free) {
    int32_t pos = q.able_pos[id];
    if (pos >= 0 && !q.by_home[pos].empty())
      consider(*q.by_home[pos].begin(), id);
  }
  // Jobs whose home is out of service go to the first free pool.
  if (!q.able.empty() && !v.free.empty())
    for (uint32_t id : idx.unavailable) {
      int32_t pos = q.able_pos[id];
      if (pos < 0 || q.by_home[pos].empty() || !given_up(id))
        continue;
      uint32_t i = *q.by_home[pos].begin();
      if (auto pool = first_free_for(v.r.jobs[i]))
        consider(i, *pool);
    }
  // Jobs that ran out of memory somewhere, or of another size: their turn among the
  // pools left to them.
  if (!q.restricted.empty()) {
    auto ids = idx.mode_ids.find(v.r.mode);
    for (uint32_t i : q.restricted) {
      if (best && best->job < i)
        break;
      const job& j = v.r.jobs[i];
      std::vector<uint32_t> able;
      if (ids != idx.mode_ids.end())
        for (uint32_t id : ids->second)
          if (pool_may_take(v.pool(id), j))
            able.push_back(id);
      if (able.empty())
        continue;
      uint32_t home = able[(q.turn_base + i) % able.size()];
      if (idx.free_flag[home] && std::find(v.free.begin(), v.free.end(), home) != v.free.end())
        consider(i, home);
      else if (given_up(home))
        if (auto pool = first_free_for(j))
          consider(i, *pool);
    }
  }
  return best;
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

} // namespace vidline::actors::coordinator
