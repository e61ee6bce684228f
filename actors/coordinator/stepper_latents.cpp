// The stepper (stepper.hpp): the latents a host holds: kept, adopted or released.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/graph.hpp"

namespace vidline::actors::coordinator {

void stepper::on(const ev_latent_holdings& e) {
  const auto& h = e.h;
  if (h.latents.empty())
    return;
  std::set<std::string> needed;
  for (auto& [t, rp, ji] : s.idx.sampled)
    needed.insert(s.runs[rp].jobs[ji].latent_sha256);
  for (auto& [d, jobs] : s.idx.decoding)
    for (auto& [rp, ji] : jobs)
      needed.insert(s.runs[rp].jobs[ji].latent_sha256);
  for (auto& [t, rp, ji] : s.idx.backoff)  // sampled, waiting to be ordered again
    if (s.runs[rp].jobs[ji].state == job_state::sampled)
      needed.insert(s.runs[rp].jobs[ji].latent_sha256);
  coordinator::latents_wanted(s, needed);  // handed over to a shot that continues from it
  std::vector<std::string> release;
  std::map<std::string, bool> final_names;  ///< digest -> every job naming it is final
  for (auto& l : h.latents) {
    if (l.checkpoint_step != 0) {
      auto* j = l.run_id.empty() ? nullptr : s.find_job(l.run_id, l.index);
      bool changed = false;
      if (release_held_checkpoint(s, j, l, h.host, changed, fx))
        release.push_back(l.sha256);
      if (changed)
        persist(*j);
      continue;
    }
    if (needed.count(l.sha256) != 0)
      continue;
    if (l.run_id.empty()) {
      // A received copy (no note): released once every job naming it succeeded. One no
      // job names is kept: it may be this host's own, not yet reported.
      if (final_names.empty())
        for (auto& r : s.runs)
          for (auto& j : r.jobs)
            if (!j.latent_sha256.empty()) {
              const bool fin = j.state == job_state::succeeded;
              auto [it, fresh] = final_names.emplace(j.latent_sha256, fin);
              if (!fresh)
                it->second = it->second && fin;
            }
      auto it = final_names.find(l.sha256);
      if (it != final_names.end() && it->second)
        release.push_back(l.sha256);
      continue;
    }
    auto* j = s.find_job(l.run_id, l.index);
    if (j == nullptr) {
      // A forgotten run's latent (a failed job's: the decoded ones were released) stays
      // while the journal holds the run, so resuming it decodes without sampling again.
      // A run neither here nor journaled will never want it: released.
      bool journaled = false;
      for (auto& [at, id] : s.journaled)
        if (id == l.run_id) {
          journaled = true;
          break;
        }
      if (!journaled) {
        release.push_back(l.sha256);
        log(2, "latent " + l.sha256 + " on " + h.host + " names job " + l.run_id + "/"
                 + std::to_string(l.index) + ", which no run holds: released");
      }
      continue;
    }
    // A failed job's latent stays: `vidline resume` decodes it without sampling again.
    if (j->state == job_state::sampling || j->state == job_state::failed)
      continue;
    if (j->state == job_state::cancelled) {
      release.push_back(l.sha256);  // stopped by the user: nothing will decode it
      continue;
    }
    if (j->state == job_state::queued) {
      // Not a latent this job already gave up moving (that would go round for ever).
      if (!host_up(h.host) || j->handoff_failures > s.p.lost_factor * s.p.max_attempts)
        continue;
      j->latent_sha256 = l.sha256;
      j->latent_bytes = l.bytes;
      j->latent_host = h.host;
      j->sample_end = now;
      j->ran = stage_clock{};
      j->ran.sampler_end = now;  // made before: its sampling is not known, its wait is
      set_state(*j, job_state::sampled);
      j->error.clear();
      persist(*j);
      needed.insert(l.sha256);
      log(2, "job " + job_name(*j) + " adopted latent " + l.sha256 + " re-offered by " + h.host);
      continue;
    }
    release.push_back(l.sha256);  // finished, or went on with another latent
  }
  if (!release.empty())
    fx.push_back(fx_release{h.host, std::move(release)});
}

} // namespace vidline::actors::coordinator
