// The scheduler's index (scheduler.hpp, run_index): which jobs are queued, sampled, decoding
// or backing off, by mode, pool and home, kept current by every state change so dispatch
// never scans all runs. reindex rebuilds it; check_index compares it with a rebuild.
#include "actors/coordinator/index.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/verdicts.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <unordered_map>

namespace vidline::actors::coordinator {

// -- the index -------------------------------------------------------------------------------

namespace detail {

/// A queued job every able pool may take: no out-of-memory history, the run's size.
bool unrestricted(const run& r, const run_index& ri, const job& j) {
  return j.capacity_failed.empty() && !ri.able.empty()
         && job_load(j.spec) == job_load(r.jobs.front().spec);
}

/// A queued or sampled job waiting out its retry backoff (state_index::backoff).
bool backing_off(const job& j) {
  return j.retry_at >= 0 && (j.state == job_state::queued || j.state == job_state::sampled);
}

void enter(state& s, std::size_t rp, const job& j) {
  auto& ri = s.idx.runs[rp];
  const uint32_t i = j.spec.index;
  if (backing_off(j)) {
    s.idx.backoff.emplace(j.retry_at, rp, i);
    return;
  }
  switch (j.state) {
    case job_state::queued:
      ri.queued.insert(i);
      ri.queued_by_model[j.spec.model].insert(i);
      if (unrestricted(s.runs[rp], ri, j))
        ri.by_home[(ri.turn_base + i) % ri.able.size()].insert(i);
      else
        ri.restricted.insert(i);
      break;
    case job_state::sampled: s.idx.sampled.emplace(j.sample_end, rp, i); break;
    case job_state::decoding: s.idx.decoding[j.decoder].emplace(rp, i); break;
    case job_state::succeeded:
    case job_state::failed:
    case job_state::reused:
    case job_state::cancelled: --ri.unfinished; break;
    case job_state::sampling:
    case job_state::waiting: break;
  }
}

void leave(state& s, std::size_t rp, const job& j) {
  auto& ri = s.idx.runs[rp];
  const uint32_t i = j.spec.index;
  if (backing_off(j)) {
    s.idx.backoff.erase({j.retry_at, rp, i});
    return;
  }
  switch (j.state) {
    case job_state::queued: {
      ri.queued.erase(i);
      ri.restricted.erase(i);
      auto m = ri.queued_by_model.find(j.spec.model);
      if (m != ri.queued_by_model.end() && m->second.erase(i) && m->second.empty())
        ri.queued_by_model.erase(m);
      if (!ri.by_home.empty())
        ri.by_home[(ri.turn_base + i) % ri.by_home.size()].erase(i);
      break;
    }
    case job_state::sampled: s.idx.sampled.erase({j.sample_end, rp, i}); break;
    case job_state::decoding: {
      auto it = s.idx.decoding.find(j.decoder);
      if (it != s.idx.decoding.end()) {
        it->second.erase({rp, i});
        if (it->second.empty())
          s.idx.decoding.erase(it);
      }
      break;
    }
    case job_state::succeeded:
    case job_state::failed:
    case job_state::reused:
    case job_state::cancelled: ++ri.unfinished; break;
    case job_state::sampling:
    case job_state::waiting: break;
  }
}

/// Moves a job to another state, keeping the index current. A change of state ends any
/// retry backoff (hold_back() starts one after it).
void move_job(state& s, job& j, job_state to) {
  if (j.state == to)
    return;
  auto rp = s.idx.run_pos.at(j.spec.run_id);
  leave(s, rp, j);
  j.state = to;
  j.retry_at = -1;
  enter(s, rp, j);
}

/// Sets (until >= 0) or ends (-1) a queued or sampled job's retry backoff.
void set_retry_at(state& s, job& j, double until) {
  auto rp = s.idx.run_pos.at(j.spec.run_id);
  leave(s, rp, j);
  j.retry_at = until;
  enter(s, rp, j);
}

/// Ends every backoff that is over by `now`: those jobs may be ordered again.
void end_backoffs(state& s, double now) {
  while (!s.idx.backoff.empty() && std::get<0>(*s.idx.backoff.begin()) <= now) {
    auto [at, rp, i] = *s.idx.backoff.begin();
    set_retry_at(s, s.runs[rp].jobs[i], -1);
  }
}

/// The ids of a mode's pools in order (each once), and each pool id's position in it.
void index_mode(state& s, const std::string& mode) {
  auto& ids = s.idx.mode_ids[mode];
  auto& pos = s.idx.mode_pos[mode];
  ids.clear();
  pos.assign(s.idx.pool_names.size(), -1);
  auto m = s.modes.find(mode);
  if (m == s.modes.end())
    return;
  for (auto& name : m->second) {
    auto id = s.idx.pool_ids.find(name);
    if (id == s.idx.pool_ids.end() || pos[id->second] >= 0)
      continue;
    pos[id->second] = static_cast<int32_t>(ids.size());
    ids.push_back(id->second);
  }
}

/// Indexes run `rp` (its jobs as they are).
void index_run(state& s, std::size_t rp) {
  auto& r = s.runs[rp];
  s.idx.run_pos[r.id] = rp;
  if (s.idx.runs.size() <= rp)
    s.idx.runs.resize(rp + 1);
  auto& ri = s.idx.runs[rp];
  ri = run_index{};
  // The rotation goes on over the queue: after the jobs of the earlier runs of its mode,
  // the forgotten ones included.
  if (auto f = s.forgotten_jobs.find(r.mode); f != s.forgotten_jobs.end())
    ri.turn_base = f->second;
  for (std::size_t k = 0; k < rp; ++k)
    if (s.runs[k].mode == r.mode)
      ri.turn_base += s.runs[k].jobs.size();
  ri.able_pos.assign(s.idx.pool_names.size(), -1);
  if (!s.idx.mode_ids.count(r.mode))
    index_mode(s, r.mode);
  if (!r.jobs.empty()) {
    job probe;
    probe.spec.width = r.jobs.front().spec.width;
    probe.spec.height = r.jobs.front().spec.height;
    probe.spec.seconds = r.jobs.front().spec.seconds;
    for (uint32_t id : s.idx.mode_ids[r.mode])
      if (pool_may_take(*s.idx.pool_views[id], probe)) {
        ri.able_pos[id] = static_cast<int32_t>(ri.able.size());
        ri.able.push_back(id);
      }
  }
  ri.by_home.assign(ri.able.size(), {});
  ri.unfinished = static_cast<uint32_t>(r.jobs.size());
  for (auto& j : r.jobs) {
    enter(s, rp, j);
    if (j.state == job_state::cancelled && j.attempt != 0)
      s.idx.cancelled_attempts.insert(j.attempt);
    if (verdict_due(j))
      s.idx.verdicts_due[j.decoder].emplace(r.id, j.spec.index);
    auto p = s.pools.find(j.pool);
    if (j.sample_start >= 0 && p != s.pools.end()) {
      auto [it, fresh] = ri.first_order_on_host.emplace(p->second.host, j.sample_start);
      if (!fresh)
        it->second = std::min(it->second, j.sample_start);
    }
  }
  coordinator::index_run_graph(s, rp);
}

/// The runs in dispatch order: priority (higher first), then submission order.
void order_runs(state& s) {
  auto& o = s.idx.run_order;
  o.resize(s.runs.size());
  for (std::size_t k = 0; k < o.size(); ++k)
    o[k] = k;
  std::stable_sort(o.begin(), o.end(), [&](std::size_t a, std::size_t b) {
    return s.runs[a].priority > s.runs[b].priority;
  });
}

/// Out of service: its host is down, it never reported, or it reported itself away.
bool unavailable(const state& s, const pool_view& p) {
  return !s.host_up(p.host) || p.epoch == 0 || !p.alive || !p.accepting || p.drained;
}

void set_flags(state& s, uint32_t id) {
  const auto& name = s.idx.pool_names[id];
  bool free = s.pool_free(name);
  s.idx.free_flag[id] = free;
  if (free)
    s.idx.free_pools.insert(id);
  else
    s.idx.free_pools.erase(id);
  bool away = unavailable(s, *s.idx.pool_views[id]);
  s.idx.unavailable_flag[id] = away;
  if (away)
    s.idx.unavailable.insert(id);
  else
    s.idx.unavailable.erase(id);
}

/// A pool changed: it, and every pool whose freedom depends on it, are looked at again.
void refresh_pool(state& s, uint32_t id) {
  set_flags(s, id);
  for (uint32_t q : s.idx.related[id])
    set_flags(s, q);
}

/// The decoder views of every mode, in the mode's order.
void link_decoders(state& s) {
  s.idx.mode_decoder_views.clear();
  for (auto& [mode, names] : s.mode_decoders) {
    auto& views = s.idx.mode_decoder_views[mode];
    for (auto& name : names)
      if (auto it = s.decoders.find(name); it != s.decoders.end())
        views.push_back(&it->second);
  }
}

/// Points the index at this state (after the state was copied or moved).
void relink(state& s) {
  for (std::size_t id = 0; id < s.idx.pool_names.size(); ++id)
    s.idx.pool_views[id] = &s.pools.at(s.idx.pool_names[id]);
  link_decoders(s);
  s.idx.owner = &s;
}

} // namespace detail

using namespace detail;

void reindex(state& s) {
  s.idx = state_index{};
  s.idx.built = true;
  s.idx.owner = &s;
  for (auto& [name, p] : s.pools) {
    s.idx.pool_ids.emplace(name, static_cast<uint32_t>(s.idx.pool_names.size()));
    s.idx.pool_names.push_back(name);
    s.idx.pool_views.push_back(&p);
  }
  const std::size_t n = s.idx.pool_names.size();
  s.idx.related.assign(n, {});
  for (auto& [name, p] : s.pools)
    for (auto& q : p.conflicts) {
      auto qi = s.idx.pool_ids.find(q);
      if (qi == s.idx.pool_ids.end())
        continue;
      uint32_t a = s.idx.pool_ids.at(name), b = qi->second;
      s.idx.related[a].push_back(b);
      s.idx.related[b].push_back(a);
    }
  for (auto& r : s.idx.related) {
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
  }
  for (auto& [name, p] : s.pools)
    if (!p.decoders_sharing.empty())
      s.idx.decoder_shared.push_back(s.idx.pool_ids.at(name));
  s.idx.free_flag.assign(n, 0);
  s.idx.unavailable_flag.assign(n, 0);
  for (uint32_t id = 0; id < n; ++id)
    set_flags(s, id);
  for (auto& [mode, pools] : s.modes)
    index_mode(s, mode);
  link_decoders(s);
  for (std::size_t rp = 0; rp < s.runs.size(); ++rp)
    index_run(s, rp);
  order_runs(s);
}

std::string check_index(const state& s) {
  state fresh = s;
  reindex(fresh);
  const auto& a = s.idx;
  const auto& b = fresh.idx;
  if (!a.built)
    return "not built";
  if (a.pool_names != b.pool_names)
    return "pool ids differ";
  if (a.run_pos != b.run_pos)
    return "run positions differ";
  if (a.runs.size() != b.runs.size())
    return "run count differs";
  for (std::size_t rp = 0; rp < a.runs.size(); ++rp) {
    const auto& x = a.runs[rp];
    const auto& y = b.runs[rp];
    std::string run = "run " + s.runs[rp].id + ": ";
    if (x.queued != y.queued)
      return run + "queued jobs differ";
    if (x.queued_by_model != y.queued_by_model)
      return run + "queued jobs by model differ";
    if (x.turn_base != y.turn_base)
      return run + "turn base " + std::to_string(x.turn_base) + " != "
             + std::to_string(y.turn_base);
    if (x.restricted != y.restricted)
      return run + "restricted jobs differ";
    if (x.by_home != y.by_home)
      return run + "jobs by home pool differ";
    if (x.unfinished != y.unfinished)
      return run + "unfinished count " + std::to_string(x.unfinished) + " != "
             + std::to_string(y.unfinished);
  }
  if (a.sampled != b.sampled)
    return "sampled jobs differ";
  if (a.backoff != b.backoff)
    return "jobs backing off differ";
  if (a.run_order != b.run_order)
    return "run order differs";
  if (a.cancelled_attempts != b.cancelled_attempts)
    return "cancelled attempts differ";
  if (a.decoding != b.decoding)
    return "decoding jobs differ";
  if (a.free_pools != b.free_pools || a.free_flag != b.free_flag)
    return "free pools differ";
  if (a.unavailable != b.unavailable || a.unavailable_flag != b.unavailable_flag)
    return "unavailable pools differ";
  if (a.verdicts_due != b.verdicts_due)
    return "verdicts due differ";
  return "";
}

} // namespace vidline::actors::coordinator
