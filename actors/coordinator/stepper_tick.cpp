// The stepper (stepper.hpp): the tick; drains, GPU health and power readings.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/drain.hpp"
#include "actors/coordinator/graph.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

void stepper::on(const ev_tick&) {
  retain();
  coordinator::ask_inputs(s, fx, now);
  expire_leases();
  // Latents on a host that stays down are sampled again elsewhere (in job order).
  if (s.host_down_since.empty())
    return;
  std::vector<std::pair<std::size_t, uint32_t>> gone;
  auto check = [&](std::size_t rp, uint32_t ji) {
    auto& j = s.runs[rp].jobs[ji];
    auto down = s.host_down_since.find(j.latent_host);
    if (down != s.host_down_since.end() && now - down->second >= s.p.latent_wait_s)
      gone.emplace_back(rp, ji);
  };
  for (auto& [t, rp, ji] : s.idx.sampled)
    check(rp, ji);
  for (auto& [t, rp, ji] : s.idx.backoff)
    if (s.runs[rp].jobs[ji].state == job_state::sampled)
      check(rp, ji);
  std::sort(gone.begin(), gone.end());
  for (auto& [rp, ji] : gone) {
    auto& j = s.runs[rp].jobs[ji];
    requeue_sampling(j, "latent host " + j.latent_host + " down");
  }
}

void stepper::on(const ev_drain& e) { apply_drain(s, e, now, fx); }

void stepper::on(const ev_gpu_health& e) { apply_gpu_health(s, e, now, fx); }

void stepper::on(const ev_gpu_power& e) {
  for (auto& r : e.readings)
    s.power.reading(r.gpu, r.unix_s / s.p.time_scale, r.power_w);
  s.power.forget(now);
}

} // namespace vidline::actors::coordinator
