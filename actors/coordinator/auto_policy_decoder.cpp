// The auto policy's decoder choice (auto_policy::pick_decoder): the decoder that would write
// the video first, judged near the end of a batch by when the last latent is written. The
// rest of the policy is in auto_policy.cpp and auto_policy_consts.cpp.
#include "actors/coordinator/auto_policy_detail.hpp"

#include <algorithm>
#include <optional>

namespace vidline::actors::coordinator {

using auto_detail::never;
using auto_detail::tie_s;

decoder_view* auto_policy::pick_decoder(const state& s, const run& r, const job& j,
                                        const std::vector<decoder_view*>& decoders,
                                        double now) const {
  if (!s.idx.mode_ids.count(r.mode))
    return dispatch_policy::pick_decoder(s, r, j, decoders, now);
  const mode_consts& c = consts(s, r.mode, j.spec);
  auto rp = s.idx.run_pos.find(r.id);
  const run_index* q = rp != s.idx.run_pos.end() ? &s.idx.runs[rp->second] : nullptr;
  const bool nothing_queued = q != nullptr && q->queued.empty();
  const std::size_t D = std::min(decoders.size(), c.decode_s.size());
  auto handoff = [&](std::size_t k, const std::string& from) {
    return from == decoders[k]->host ? c.handoff_local_s[k] : c.handoff_remote_s[k];
  };
  // When each decoder is through the latents it decodes or has on the way, oldest order
  // first, each after the one before. A decoder on a pool's GPU only once the run has
  // nothing left to sample, and not while that pool samples.
  std::vector<double> free_at(D, never);
  for (std::size_t k = 0; k < D; ++k) {
    auto* d = decoders[k];
    if (!d->alive || d->drained
        || (c.decoder_shared[k] && (!nothing_queued || decoder_blocked(s, *d))))
      continue;
    // (The one it decodes began when it arrived or when the one before was done, not now.)
    double t = -never;
    if (!d->sent.empty()) {
      double times[4];
      std::size_t m = 0;
      for (auto& [attempt, at] : d->sent)
        if (m < 4)
          times[m++] = at;
      std::sort(times, times + m);
      for (std::size_t i = 0; i < m; ++i)
        t = std::max(t, times[i] + handoff(k, j.latent_host)) + c.decode_s[k];
    }
    free_at[k] = std::max(t, now);
  }
  // Without a credit it takes a new latent only when its oldest one is done.
  auto end_on = [&](const std::vector<double>& f, std::size_t k, double ready,
                    const std::string& from) {
    return f[k] == never ? never : std::max(ready + handoff(k, from), f[k]) + c.decode_s[k];
  };

  // At the end of a batch (nothing queued, a few latents still to come) the choice is
  // judged by when the last of them is written: the latents the run's pools sample now
  // and those sampled after this one go, in order, each to the decoder that writes it
  // first. (Latent by latent, the faster decoder can be the earlier finish for this one and
  // still end the batch later, when a latent it is needed for is on its way.)
  std::vector<std::pair<double, const std::string*>> coming;
  bool look = nothing_queued && D > 1 && D <= 8;
  // When a pool sampling a job of this run should be done (nullopt: it is not).
  auto sampled_at = [&](const pool_view& p) -> std::optional<double> {
    if (!p.assigned || p.assigned->first != r.id || p.assigned->second >= r.jobs.size())
      return std::nullopt;
    const auto& spec = r.jobs[p.assigned->second].spec;
    auto sm = est_->sampling(p.kind, spec, !warm_for(p, spec));
    double start = p.ordered_at;
    if (auto f = q->first_order_on_host.find(p.host); f != q->first_order_on_host.end())
      start = std::max(start, f->second + est_->conditioning(p.host));
    return std::max(now, start + (sm ? *sm * p.speed_factor : 0));
  };
  if (look) {
    for (uint32_t id : s.idx.mode_ids.at(r.mode)) {
      const pool_view& p = *s.idx.pool_views[id];
      if (auto t = sampled_at(p))
        coming.emplace_back(*t, &p.host);
      if (coming.size() > 64)
        break;
    }
    for (auto& [t, run_pos, ji] : s.idx.sampled) {
      if (coming.size() > 64)
        break;
      if (q != nullptr && run_pos == rp->second && ji != j.spec.index)
        coming.emplace_back(now, &r.jobs[ji].latent_host);
    }
    look = !coming.empty() && coming.size() <= 64;
    std::sort(coming.begin(), coming.end());
  }
  // A decoder on a pool's GPU is free for later latents once its pools are done sampling.
  std::vector<double> later_free = free_at;
  if (look)
    for (std::size_t k = 0; k < D; ++k)
      if (c.decoder_shared[k] && decoders[k]->alive && !decoders[k]->drained && nothing_queued
          && later_free[k] == never) {
        double t = now;
        for (auto& name : decoders[k]->shares_gpu_with)
          if (auto it = s.idx.pool_ids.find(name); it != s.idx.pool_ids.end()) {
            const pool_view& p = *s.idx.pool_views[it->second];
            if (auto done = sampled_at(p))
              t = std::max(t, *done);
            else if (p.assigned || p.reported_busy != 0)
              t = never;  // another run's job: not before it is done, unknown when
          }
        later_free[k] = t;
      }

  decoder_view* best = nullptr;
  double best_T = never, best_end = never;
  for (std::size_t k = 0; k < D; ++k) {
    double end = end_on(free_at, k, now, j.latent_host);
    if (end == never)
      continue;
    double T = end;
    if (look) {
      std::vector<double> f = later_free;
      f[k] = end;
      for (auto& [ready, from] : coming) {
        double e = never;
        std::size_t bk = 0;
        for (std::size_t x = 0; x < D; ++x) {
          double ex = end_on(f, x, ready, *from);
          if (ex < e - tie_s) {
            e = ex;
            bk = x;
          }
        }
        if (e == never)
          continue;
        f[bk] = e;
        T = std::max(T, e);
      }
    }
    if (T < best_T - tie_s || (T <= best_T + tie_s && end < best_end - tie_s)) {
      best_T = T;
      best_end = end;
      best = decoders[k];
    }
  }
  return best != nullptr && best->credits() > 0 ? best : nullptr;
}

} // namespace vidline::actors::coordinator
