// The stepper (stepper.hpp): a result's stages on the run clock, their energy; failed attempts.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

// -- stage times -------------------------------------------------------------------------

void stepper::order_stamps(std::vector<double*> t) const {
  double lo = -1;
  for (double* v : t)
    if (*v >= 0)
      lo = *v = std::max(*v, lo);
  double hi = now;
  for (auto it = t.rbegin(); it != t.rend(); ++it)
    if (**it >= 0)
      hi = **it = std::min(**it, hi);
}

void stepper::record_sampling(job& j, const msg::sample_result& r) {
  stage_clock c;
  c.sampler_end = run_of(r.end_unix_s);
  if (c.sampler_end < 0)
    c.sampler_end = now;
  c.sampler_start = run_of(r.sampling_start_unix_s);
  if (c.sampler_start < 0)
    c.sampler_start = c.sampler_end - r.sampling_s;
  c.pool_start = run_of(r.start_unix_s);
  if (c.pool_start < 0)
    c.pool_start = c.sampler_start - r.conditioning_s;
  order_stamps({&c.pool_start, &c.sampler_start, &c.sampler_end});
  j.ran = c;
  if (auto p = s.pools.find(r.pool); p != s.pools.end())
    j.sampling_energy_j = s.power.stage(job_name(j) + " sampling", p->second.cards,
                                        c.pool_start, c.sampler_end,
                                        running_on(p->second.cards, p->second.host, r.pool, {}));
}

std::vector<gpu::power_log::running> stepper::running_on(const std::vector<std::string>& cards,
                                                         const std::string& host,
                                                         const std::string& self_pool,
                                                         const std::string& self_decoder) const {
  std::vector<gpu::power_log::running> out;
  if (cards.empty())
    return out;
  auto add = [&](const std::vector<std::string>& theirs, double since) {
    for (auto& c : theirs)
      if (std::find(cards.begin(), cards.end(), c) != cards.end())
        out.push_back({c, since});
  };
  // Cards are "host/gpu": only pools and decoders of the same host can share one.
  for (auto& [name, p] : s.pools)
    if (p.assigned && p.ordered_at >= 0 && p.host == host && name != self_pool)
      add(p.cards, p.ordered_at);
  for (auto& [name, d] : s.decoders)
    if (!d.sent.empty() && d.host == host && name != self_decoder)
      for (auto& [attempt, since] : d.sent)
        add(d.cards, since);
  return out;
}

void stepper::record_decoding(job& j, const msg::decode_result& r) {
  auto& c = j.ran;
  c.decode_end = run_of(r.end_unix_s);
  if (c.decode_end < 0)
    c.decode_end = now;
  c.decode_start = run_of(r.decode_start_unix_s);
  if (c.decode_start < 0)
    c.decode_start = c.decode_end - r.decode_s;
  c.fetched = run_of(r.fetched_unix_s);
  if (c.fetched < 0)
    c.fetched = c.decode_start;
  c.fetch_start = run_of(r.start_unix_s);
  if (c.fetch_start < 0)
    c.fetch_start = c.fetched - r.handoff_s;
  if (c.decode_ordered < 0 || c.decode_ordered > c.fetch_start)
    c.decode_ordered = c.fetch_start;  // older records, or the decoder's clock behind
  order_stamps({&c.sampler_end, &c.decode_ordered, &c.fetch_start, &c.fetched,
                &c.decode_start, &c.decode_end});
  if (auto d = s.decoders.find(r.decoder); d != s.decoders.end())
    j.decode_energy_j = s.power.stage(job_name(j) + " decode", d->second.cards,
                                      c.decode_start, c.decode_end,
                                      running_on(d->second.cards, d->second.host, {}, r.decoder));
}

std::pair<double, double> stepper::stamps_of(double start_unix, double end_unix) const {
  double a = run_of(start_unix), b = run_of(end_unix);
  if (b >= 0)
    b = std::min(b, now);
  if (a >= 0 && b >= 0)
    a = std::min(a, b);
  return {a, b};
}

void stepper::note_failure(job& j, const std::string& why, bool redone) {
  failed_attempt f;
  if (j.state == job_state::sampling) {
    f.stage = "sampling";
    f.lane = j.pool;
  } else if (j.state == job_state::decoding) {
    f.stage = "decode";
    f.lane = j.decoder;
  } else {
    return;
  }
  f.start = failing_stamps.first >= 0 ? failing_stamps.first : j.attempt_at;
  f.end = failing_stamps.second >= 0 ? failing_stamps.second : now;
  if (f.start < 0 || f.start > f.end)
    f.start = f.end;
  f.reason = why;
  if (f.stage == "sampling" && redone) {
    // Paid twice: the job samples again from the newest checkpoint this attempt saved
    // (checkpoints.hpp), else from where the attempt began. An attempt lost without a
    // result (its host killed, stopped or cut off) is counted until its pool last
    // reported running it: a dead or stopped host does no work while the lease runs out.
    // Never reported running: until it was given up.
    auto p = s.pools.find(f.lane);
    const double from = std::clamp(kept_until(s, j), f.start, f.end);
    double until = f.end;
    if (failing_stamps.second < 0 && j.running_attempt == j.attempt && j.running_seen_at >= 0)
      until = std::clamp(j.running_seen_at, from, f.end);
    const double gpu_s = (until - from) * (p == s.pools.end() ? 1 : p->second.gpus);
    j.gpu_s_redone += gpu_s;
    s.gpu_s_redone += gpu_s;
  }
  j.failures.push_back(std::move(f));
  if (j.failures.size() > max_failures_kept)
    j.failures.erase(j.failures.begin());
  ++j.failures_total;
}

} // namespace vidline::actors::coordinator
