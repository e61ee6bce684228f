#include "actors/planner/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "actors/inbound.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"

namespace vidline::actors::planner {

using namespace coordinator;

namespace {

config::profile::job_size size_of(const msg::job_spec& j) { return config::profile::job_size{j.width, j.height, j.seconds}; }

/// Fills out.energy_j / wh_per_clip from the finished jobs' stage clocks and the profile's
/// power figures (or names the kinds without one in out.unpowered).
void plan_energy(plan_result& out, const coordinator::state& s0, const config::profile::profile& prof,
                 const coordinator::run& r) {
  std::set<std::string> unpowered;
  double joules = 0;
  auto watts = [&](const auto& entries, const std::string& kind, const char* what) {
    auto e = entries.find(kind);
    if (e == entries.end() || !e->second.power) {
      unpowered.insert(std::string(what) + " kind " + kind);
      return 0.0;
    }
    return e->second.power->watts;
  };
  for (auto& j : r.jobs) {
    if (j.state != coordinator::job_state::succeeded)
      continue;
    if (auto p = s0.pools.find(j.pool); p != s0.pools.end() && j.ran.pool_start >= 0)
      joules += watts(prof.pools(), p->second.kind, "pool")
                * std::max(0.0, j.ran.sampler_end - j.ran.pool_start);
    if (auto d = s0.decoders.find(j.decoder); d != s0.decoders.end() && j.ran.decode_start >= 0)
      joules += watts(prof.decoders(), d->second.kind, "decoder")
                * std::max(0.0, j.ran.decode_end - j.ran.decode_start);
  }
  out.unpowered.assign(unpowered.begin(), unpowered.end());
  if (!unpowered.empty() || out.summary.succeeded == 0)
    return;
  out.energy_j = joules;
  out.wh_per_clip = joules / 3600.0 / out.summary.succeeded;
}

} // namespace

timing line_timing(const coordinator::profile_estimates& est) {
  timing t;
  t.sample = [&est](const std::string& kind, const msg::job_spec& j, bool cold) {
    if (!est.profile().fits(kind, size_of(j)))
      return sample_time{est.profile().capacity(kind).fail_after_s, true};
    return sample_time{*est.sampling(kind, j, cold), false};
  };
  t.conditioning = [&est](const std::string& host) { return est.conditioning(host); };
  t.handoff = [&est](const std::string&, uint64_t) { return est.profile().handoff(false).s; };
  t.handoff_between = [&est](const std::string& from, const std::string& to,
                             const std::string&, uint64_t) { return est.profile().handoff(from == to).s; };
  t.decode = [&est](const std::string& kind, const msg::job_spec& j) {
    coordinator::decoder_view d;
    d.kind = kind;
    return est.decode(d, j);
  };
  t.latent_bytes = [&est](const msg::job_spec& j) { return est.profile().latent_bytes(size_of(j)); };
  return t;
}

plan_result plan(const coordinator::state& s0, const profile_estimates& est, const request& req,
                 const sim_options& o) {
  plan_result out;
  out.mode = req.mode;
  auto m = s0.modes.find(req.mode);
  if (m == s0.modes.end()) {
    std::string known;
    for (auto& [name, pools] : s0.modes)
      known += (known.empty() ? "" : ", ") + name;
    out.refused = "unknown mode '" + req.mode + "' (known: " + known + ")";
    return out;
  }
  out.pools = m->second;
  if (auto d = s0.mode_decoders.find(req.mode); d != s0.mode_decoders.end())
    out.decoders = d->second;
  out.policy = s0.policy_of(req.mode).name();
  for (auto& name : out.pools)
    if (auto p = s0.pools.find(name); p != s0.pools.end() && !est.profile().has_pool(p->second.kind))
      out.refused = "the profile has no timings for pool kind '" + p->second.kind + "' (pool "
                    + name + ")";
  for (auto& name : out.decoders)
    if (auto d = s0.decoders.find(name);
        d != s0.decoders.end() && !est.profile().has_decoder(d->second.kind))
      out.refused = "the profile has no timings for decoder kind '" + d->second.kind
                    + "' (decoder " + name + ")";
  if (out.refused.empty() && out.decoders.empty())
    out.refused = "mode " + req.mode + " has no decoder";
  if (out.refused.empty())
    out.refused = req.shots.empty()
                    ? capacity_refusal(s0, req.mode, req.width, req.height, req.seconds)
                    : shots_capacity_refusal(s0, req.mode, req.shots);
  if (out.refused.empty() && req.shots.empty() && req.count == 0)
    out.refused = "count must be at least 1";
  if (!out.refused.empty())
    return out;

  coordinator::run r;
  r.id = "plan";
  r.mode = req.mode;
  if (!req.shots.empty()) {
    // Each prompt its own conditioning key, as the coordinator's SHA-256 of it would be.
    std::map<std::string, std::string> keys;
    for (auto& spec : coordinator::shot_jobs(req.shots, r.id, "", "", req.catalog, req.critical_path_first)) {
      coordinator::job j;
      j.spec = std::move(spec);
      auto k = keys.emplace(j.spec.prompt, "plan-prompt-" + std::to_string(keys.size()));
      j.spec.prompt_sha256 = k.first->second;
      r.jobs.push_back(std::move(j));
    }
  } else {
    r.jobs.reserve(req.count);
    for (uint32_t i = 0; i < req.count; ++i) {
      coordinator::job j;
      j.spec = msg::job_spec{r.id, i, req.seed + i, req.width, req.height, req.seconds,
                             req.prompt, "plan-prompt", ""};
      r.jobs.push_back(std::move(j));
    }
  }
  auto res = simulate(s0, std::move(r), planner::line_timing(est), faults{}, 1e12, o);
  out.finished = res.finished;
  out.violations = std::move(res.violations);
  out.events = res.events;
  out.summary = coordinator::summarize(res.run);
  plan_energy(out, s0, est.profile(), res.run);
  out.step_seconds = std::move(res.step_seconds);
  out.detailed = o.record_spans;
  if (!out.detailed)
    return out;  // a summary only: no row per job
  out.jobs.resize(res.run.jobs.size());
  for (auto& j : res.run.jobs) {
    auto& pj = out.jobs[j.spec.index];
    pj.index = j.spec.index;
    pj.seed = j.spec.seed;
    pj.width = j.spec.width;
    pj.height = j.spec.height;
    pj.seconds = j.spec.seconds;
    pj.name = j.spec.name;
    pj.pool = j.pool;
    pj.decoder = j.decoder;
    pj.cold = j.cold;
    pj.model = j.spec.model;
    pj.state = coordinator::to_string(j.state);
    for (auto& in : j.spec.inputs)
      if (in.from_index >= 0)
        pj.takes_from.push_back(static_cast<uint32_t>(in.from_index));
  }
  // The last span of each stage is the one that counted (earlier ones were retried).
  for (auto& sp : res.spans) {
    if (sp.job >= out.jobs.size())
      continue;
    auto& pj = out.jobs[sp.job];
    planned_job::span v{sp.start, sp.end};
    if (sp.stage == "conditioning")
      pj.conditioning = v;
    else if (sp.stage == "sampling")
      pj.sampling = v;
    else if (sp.stage == "handoff")
      pj.handoff = v;
    else if (sp.stage == "decode")
      pj.decode = v;
  }
  out.spans = std::move(res.spans);
  return out;
}

std::vector<std::string> modes_to_compare(const coordinator::state& s, const config::cluster& c) {
  std::vector<std::string> out;
  for (auto& m : c.modes)
    out.push_back(m.name);
  if (s.modes.count(coordinator::auto_mode) && std::find(out.begin(), out.end(), auto_mode) == out.end())
    out.push_back(auto_mode);
  return out;
}

} // namespace vidline::actors::planner
