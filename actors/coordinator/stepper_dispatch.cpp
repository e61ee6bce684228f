// The stepper (stepper.hpp): orders to pools and decoders; finished runs closed.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/index.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

using namespace detail;  // the index's mutators (index.hpp)

namespace {

/// Queued jobs of a pool's model looked at per decision (model affinity): a decision's
/// cost stays bounded however long the queue is.
constexpr std::size_t max_model_scan = 64;

} // namespace

// -- dispatch ----------------------------------------------------------------------------

void stepper::send_sample(pool_view& p, job& j) {
  j.order_sent_at = now;
  fx.push_back(
    fx_send_sample{p.host, msg::sample_order{p.name, j.attempt, j.spec, resume_point(s, j, p)}});
}

void stepper::send_decode(decoder_view& d, job& j) {
  // A decode on a pool's GPU unloads the pool's model.
  for (auto& name : d.shares_gpu_with)
    if (auto it = s.pools.find(name); it != s.pools.end())
      it->second.warm = false;
  j.order_sent_at = now;
  d.ordered[j.attempt] = now;
  d.sent[j.attempt] = now;
  fx.push_back(fx_send_decode{
    d.host, msg::decode_order{d.name, j.attempt, j.spec, j.latent_sha256, j.latent_bytes,
                              j.latent_host, j.pool, j.conditioning_s, j.sampling_s,
                              j.model_identity}});
}

std::vector<uint32_t> stepper::free_in_mode(const std::string& mode) {
  if (!s.idx.mode_ids.count(mode))
    index_mode(s, mode);
  const auto& ids = s.idx.mode_ids.at(mode);
  const auto& pos = s.idx.mode_pos.at(mode);
  std::vector<uint32_t> out;
  if (s.idx.free_pools.size() * 8 < ids.size()) {
    for (uint32_t id : s.idx.free_pools)
      if (pos[id] >= 0)
        out.push_back(id);
    std::sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) { return pos[a] < pos[b]; });
  } else {
    for (uint32_t id : ids)
      if (s.idx.free_flag[id])
        out.push_back(id);
  }
  return out;
}

void stepper::dispatch_sampling() {
  if (s.idx.free_pools.empty())
    return;
  // Jobs queued per mode over all open runs: a policy that looks ahead sees the queue.
  std::map<std::string, std::size_t> mode_queued;
  for (std::size_t rp = 0; rp < s.runs.size(); ++rp)
    if (!s.runs[rp].done)
      mode_queued[s.runs[rp].mode] += s.idx.runs[rp].queued.size();
  for (std::size_t rp : s.idx.run_order) {
    auto& r = s.runs[rp];
    if (r.done || s.idx.runs[rp].queued.empty() || s.idx.free_pools.empty())
      continue;
    auto free = free_in_mode(r.mode);
    const auto& policy = s.policy_of(r.mode);
    while (!free.empty()) {
      auto a = policy.next(dispatch_view{s, r, s.idx.runs[rp], free, now,
                                         std::max(mode_queued[r.mode],
                                                  s.idx.runs[rp].queued.size())});
      if (!a)
        break;
      if (a->job >= r.jobs.size() || r.jobs[a->job].state != job_state::queued
          || a->pool >= s.idx.pool_names.size() || !s.idx.free_flag[a->pool]
          || std::find(free.begin(), free.end(), a->pool) == free.end()
          || !pool_may_take(*s.idx.pool_views[a->pool], r.jobs[a->job])) {
        log(4, std::string("dispatch policy ") + policy.name() + " chose job "
                 + std::to_string(a->job) + " for pool id " + std::to_string(a->pool)
                 + ", which it may not have; nothing more dispatched for run " + r.id);
        break;
      }
      by_model(r, rp, *a, free, policy);
      order_sample(r, rp, r.jobs[a->job], *s.idx.pool_views[a->pool]);
      if (mode_queued[r.mode] > 0)
        --mode_queued[r.mode];
      free.erase(std::remove_if(free.begin(), free.end(),
                                [&](uint32_t id) { return !s.idx.free_flag[id]; }),
                 free.end());
    }
  }
}

bool stepper::held_sooner_elsewhere(const run& r, const job& j, uint32_t p_id, const job& k,
                                    const dispatch_policy& policy) {
  const pool_view& p = *s.idx.pool_views[p_id];
  auto cold_j = policy.expected_sampling(p.kind, j.spec, true);
  auto cold_k = policy.expected_sampling(p.kind, k.spec, true);
  auto ids = s.idx.mode_ids.find(r.mode);
  if (!cold_j || !cold_k || ids == s.idx.mode_ids.end())
    return false;
  const double p_done = now + (*cold_j + *cold_k) * p.speed_factor;
  for (uint32_t id : ids->second) {
    const pool_view& q = *s.idx.pool_views[id];
    if (id == p_id || s.idx.unavailable_flag[id] || !pool_may_take(q, j))
      continue;
    double free_at = now;
    if (q.assigned) {
      const run* ar = s.find_run(q.assigned->first);
      if (ar == nullptr || q.assigned->second >= ar->jobs.size())
        continue;
      const msg::job_spec& current = ar->jobs[q.assigned->second].spec;
      auto e = policy.expected_sampling(q.kind, current, !warm_for(q, current));
      if (current.model != j.spec.model || !e)
        continue;
      free_at = std::max(now, q.ordered_at + *e * q.speed_factor);
    } else if (!warm_for(q, j.spec) || q.reported_busy != 0) {
      continue;
    }
    auto warm = policy.expected_sampling(q.kind, j.spec, false);
    if (warm && free_at + *warm * q.speed_factor <= p_done)
      return true;
  }
  return false;
}

void stepper::by_model(run& r, std::size_t rp, assignment& a, const std::vector<uint32_t>& free,
                       const dispatch_policy& policy) {
  job& j = r.jobs[a.job];
  const pool_view& p = *s.idx.pool_views[a.pool];
  if (!p.warm || p.model == j.spec.model)
    return;  // nothing loaded to keep, or already the job's model
  for (uint32_t id : free) {
    const pool_view& q = *s.idx.pool_views[id];
    if (id != a.pool && q.kind == p.kind && warm_for(q, j.spec) && s.idx.free_flag[id]
        && !s.idx.unavailable_flag[id] && pool_may_take(q, j)) {
      a.pool = id;
      return;
    }
  }
  double wait = s.p.model_wait_s;
  if (wait < 0)
    wait = policy.expected_sampling(p.kind, j.spec, true).value_or(default_model_wait_s);
  auto m = s.idx.runs[rp].queued_by_model.find(p.model);
  if (m == s.idx.runs[rp].queued_by_model.end() || wait <= 0)
    return;
  const double passed = j.passed_over_at >= 0 ? now - j.passed_over_at : -1;
  if (passed >= 2 * wait)
    return;  // it has waited long enough whatever else holds its model: p switches
  // The job of p's model p would take instead: of j's size, else the lowest of any.
  const job* same = nullptr;
  const job* any = nullptr;
  std::size_t looked = 0;
  for (uint32_t i : m->second) {
    if (++looked > max_model_scan)
      break;
    const job& k = r.jobs[i];
    if (k.retry_at >= 0 || !pool_may_take(p, k))
      continue;
    if (any == nullptr)
      any = &k;
    if (k.spec.width == j.spec.width && k.spec.height == j.spec.height
        && k.spec.seconds == j.spec.seconds) {
      same = &k;
      break;
    }
  }
  const job* k = same != nullptr ? same : any;
  if (k == nullptr)
    return;
  const bool waited = passed >= wait;
  if ((waited || same == nullptr) && !held_sooner_elsewhere(r, j, a.pool, *k, policy))
    return;  // p switches to j's model
  if (j.passed_over_at < 0)
    j.passed_over_at = now;
  a.job = static_cast<uint32_t>(k - r.jobs.data());
}

void stepper::order_sample(run& r, std::size_t rp, job& j, pool_view& p) {
  set_state(j, job_state::sampling);
  j.passed_over_at = -1;
  j.attempt = s.next_attempt++;
  ++j.sample_attempts;
  j.pool = p.name;
  if (j.sample_start < 0)
    j.sample_start = now;
  j.attempt_at = now;
  j.resumed_step = resume_point(s, j, p).step;
  p.assigned = std::make_pair(r.id, j.spec.index);
  p.ordered_at = now;
  j.lease_until = mono + s.p.lease_s;  // the pool may hold it from now
  // The pools sharing its GPUs lose their loaded model.
  for (auto& q : p.conflicts)
    if (auto it = s.pools.find(q); it != s.pools.end())
      it->second.warm = false;
  s.idx.runs[rp].first_order_on_host.emplace(p.host, now);
  touch(p.name);
  persist(j);  // durable before the order leaves
  send_sample(p, j);
}

void stepper::dispatch_decoding() {
  for (auto it = s.idx.sampled.begin(); it != s.idx.sampled.end();) {
    auto [t, rp, ji] = *it;
    ++it;  // the job leaves `sampled` below
    auto& j = s.runs[rp].jobs[ji];
    if (!host_up(j.latent_host))
      continue;
    auto* d = pick_decoder(j);
    if (d == nullptr)
      break;
    j.decoder = d->name;  // the index files a decoding job by its decoder
    set_state(j, job_state::decoding);
    j.attempt = s.next_attempt++;
    j.lease_until = mono + s.p.lease_s;  // the decoder may hold it from now
    ++j.decode_attempts;
    if (j.decode_start < 0)
      j.decode_start = now;
    j.attempt_at = now;
    j.ran.decode_ordered = now;  // its wait for a decoder ends here
    persist(j);
    send_decode(*d, j);
  }
}

decoder_view* stepper::pick_decoder(const job& j) {
  const run* r = s.find_run(j.spec.run_id);
  if (r == nullptr)
    return nullptr;
  auto m = s.idx.mode_decoder_views.find(r->mode);
  if (m == s.idx.mode_decoder_views.end())
    return nullptr;
  auto* d = s.policy_of(r->mode).pick_decoder(s, *r, j, m->second, now);
  if (d != nullptr && (!d->alive || d->drained || d->credits() == 0 || decoder_blocked(s, *d)
                       || std::find(m->second.begin(), m->second.end(), d) == m->second.end())) {
    log(4, "dispatch policy chose decoder " + d->name + ", which cannot take a latent now");
    return nullptr;
  }
  return d;
}

void stepper::close_finished_runs() {
  for (std::size_t rp = 0; rp < s.runs.size(); ++rp) {
    auto& r = s.runs[rp];
    if (r.done || s.idx.runs[rp].unfinished != 0)
      continue;
    r.done = true;
    r.finished_at = now;
    fx.push_back(fx_persist_run{r.id});
    fx.push_back(fx_run_done{r.id});
    auto sum = summarize(r);
    log(2, "run " + r.id + " finished: " + std::to_string(sum.succeeded) + " succeeded, "
             + std::to_string(sum.failed) + " failed");
  }
}

} // namespace vidline::actors::coordinator
