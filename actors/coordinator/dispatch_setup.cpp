#include "actors/coordinator/dispatch_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>


namespace vidline::actors::coordinator {

using config::profile::job_size;
using config::profile::model_state;

namespace {

job_size size_of(const msg::job_spec& j) { return job_size{j.width, j.height, j.seconds}; }

/// Two pools on one GPU (never at work at once).
bool share_gpu(const config::pool& a, const config::pool& b) {
  if (a.host != b.host)
    return false;
  for (auto& g : a.gpus)
    for (auto& h : b.gpus)
      if (g == h)
        return true;
  return false;
}

} // namespace

// -- profile_estimates -----------------------------------------------------------------------

profile_estimates::profile_estimates(const config::cluster& c, config::profile::profile p)
    : p_(std::move(p)) {
  for (auto& e : c.encoders)
    encoder_of_host_.emplace(e.host, e.profile_key);
}

std::optional<double> profile_estimates::sampling(const std::string& kind,
                                                  const msg::job_spec& j, bool cold) const {
  auto key = std::make_tuple(kind, j.width, j.height, j.seconds, cold, j.model);
  auto it = sampling_.find(key);
  if (it != sampling_.end())
    return it->second;
  std::optional<double> s;
  if (p_.has_pool(kind) && p_.fits(kind, size_of(j)))
    s = p_.sampling(kind, size_of(j), cold ? model_state::cold : model_state::warm, j.model).s;
  sampling_.emplace(key, s);
  return s;
}

double profile_estimates::conditioning(const std::string& host) const {
  auto it = encoder_of_host_.find(host);
  if (it == encoder_of_host_.end() || !p_.has_encoder(it->second))
    return 0;
  return p_.conditioning(it->second).s;
}

double profile_estimates::handoff(const std::string& from_host, const decoder_view& d,
                                  const msg::job_spec&) const {
  return p_.handoff(from_host == d.host).s;
}

double profile_estimates::decode(const decoder_view& d, const msg::job_spec& j) const {
  auto key = std::make_tuple(d.kind, j.width, j.height, j.seconds);
  auto it = decode_.find(key);
  if (it != decode_.end())
    return it->second;
  double s = p_.decode(d.kind, size_of(j)).s;
  decode_.emplace(key, s);
  return s;
}

std::shared_ptr<const profile_estimates> estimates_for(const config::cluster& c,
                                                       const std::string& profile_file,
                                                       std::string* source) {
  std::string from = profile_file;
  if (from.empty()) {
    // The profile the config's sim backends pace themselves by (plan == run).
    std::set<std::string> named;
    for (auto& p : c.pools)
      if (auto* b = c.find_backend(p.backend); b != nullptr && b->type == "sim")
        named.insert(b->profile);
    named.erase("");
    if (named.size() > 1)
      std::fprintf(stderr, "warning: the config's sim backends name %zu profiles; planning "
                           "with %s\n",
                   named.size(), named.begin()->c_str());
    if (!named.empty())
      from = *named.begin();
  }
  if (source != nullptr)
    *source = from.empty() ? "embedded reference" : from;
  return std::make_shared<profile_estimates>(
    c, from.empty() ? config::profile::profile::reference() : config::profile::profile::load(from));
}

// -- configure -------------------------------------------------------------------------------

void configure(state& s, const config::cluster& c,
               std::shared_ptr<const profile_estimates> est,
               const std::map<std::string, std::string>& policies) {
  for (auto& [name, p] : s.pools)
    if (est->profile().has_pool(p.kind))
      p.max_load = est->profile().capacity(p.kind).max_load;
  // A decoder on a GPU a pool also uses: the two never work at once.
  for (auto& d : c.decoders)
    for (auto& p : c.pools)
      if (p.host == d.host && std::find(p.gpus.begin(), p.gpus.end(), d.gpu) != p.gpus.end()
          && s.decoders.count(d.name) && s.pools.count(p.name)) {
        s.decoders.at(d.name).shares_gpu_with.insert(p.name);
        s.pools.at(p.name).decoders_sharing.insert(d.name);
      }
  if (c.find_mode(auto_mode) == nullptr) {
    auto m = resolve_mode(c, auto_mode);
    s.modes[auto_mode] = m->pools;
    s.mode_decoders[auto_mode] = m->decoders;
  }
  s.mode_policy[auto_mode] = coordinator::make_policy("auto", est);
  for (auto& [mode, name] : policies) {
    auto pol = coordinator::make_policy(name, est);
    if (!pol)
      throw std::invalid_argument("unknown dispatch policy '" + name + "' for mode " + mode
                                  + " (known: in_turn, first_free, auto)");
    s.mode_policy[mode] = pol;
  }
  if (s.idx.built)
    coordinator::reindex(s);
}

state initial_state(const config::cluster& c, double time_scale) {
  state s;
  s.config = std::make_shared<const config::cluster>(c);  // what submits are checked against
  auto run_s = [&](double real_s) { return real_s / time_scale; };
  s.p.order_resend_s = run_s(c.knobs.order_resend_ms / 1000.0);
  s.p.lease_s = c.knobs.lease_ms / 1000.0;  // monotonic seconds, not the run clock
  s.p.time_scale = time_scale;              // workers' unix stamps to the run clock
  s.p.max_attempts = static_cast<uint32_t>(c.knobs.max_attempts);
  s.p.handoff_retries = static_cast<uint32_t>(c.knobs.handoff_retries);
  s.p.retry_backoff_s = run_s(c.knobs.retry_backoff_ms / 1000.0);
  s.p.retry_backoff_max_s = run_s(c.knobs.retry_backoff_max_ms / 1000.0);
  s.p.model_wait_s = c.knobs.model_wait_s < 0 ? -1.0 : run_s(c.knobs.model_wait_s);
  s.p.checkpoint_interval_s = c.knobs.checkpoint_interval_s;  // run clock already
  s.p.preempt_priority_gap = c.knobs.preempt_priority_gap;
  s.p.latent_wait_s =
    run_s(c.knobs.heartbeat_interval_ms * (c.knobs.heartbeat_misses + 7) / 1000.0);
  s.p.finished_run_memory_s = run_s(c.knobs.finished_run_memory_s);
  s.p.journal_keep_finished_s =
    c.knobs.journal_keep_finished_s == 0 ? -1 : run_s(c.knobs.journal_keep_finished_s);
  // A card's reading holds for a few sampling intervals at most (a node that stopped
  // reporting counts nothing after); readings stay for a stage of hours.
  s.power = gpu::power_log(run_s(5 * c.knobs.gpu_sample_interval_ms / 1000.0), run_s(3 * 3600));
  for (auto& p : c.pools) {
    pool_view v;
    v.name = p.name;
    v.host = p.host;
    v.kind = p.profile_key;
    v.gpus = std::max<uint32_t>(1, static_cast<uint32_t>(p.gpus.size()));
    for (auto& g : p.gpus)
      v.cards.push_back(p.host + "/" + g);
    if (auto* e = c.find_encoder_of_host(p.host))
      v.encoder_kind = e->profile_key;
    for (auto& q : c.pools)
      if (q.name != p.name && share_gpu(p, q))
        v.conflicts.insert(q.name);
    s.pools[p.name] = v;
  }
  for (auto& d : c.decoders) {
    decoder_view v;
    v.name = d.name;
    v.host = d.host;
    v.kind = d.profile_key;
    v.cards.push_back(d.host + "/" + d.gpu);
    s.decoders[d.name] = v;
  }
  for (auto& m : c.modes) {
    s.modes[m.name] = m.pools;
    s.mode_decoders[m.name] = m.decoders;
  }
  return s;
}

void configure_dispatch(state& s, const config::cluster& c) {
  std::shared_ptr<const profile_estimates> est;
  try {
    est = estimates_for(c);
  } catch (const config::profile::profile_error& e) {
    // The sim backends refuse such a profile at preflight; a line of other backends still
    // gets limits and auto's estimates from the reference measurements.
    spdlog::error("coordinator: cannot read the timing profile ({}); capacity limits and "
                  "auto's estimates come from the embedded reference profile", e.what());
    est = std::make_shared<profile_estimates>(c, config::profile::profile::reference());
  }
  std::map<std::string, std::string> policies;
  for (auto& m : c.modes)
    policies[m.name] = m.policy;
  configure(s, c, est, policies);
}

} // namespace vidline::actors::coordinator
