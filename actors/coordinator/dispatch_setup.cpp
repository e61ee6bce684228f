#include "actors/coordinator/dispatch_setup.hpp"
#include "config/shot_graph.hpp"
#include "actors/coordinator/admission.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actors/inbound.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"

namespace vidline::dispatching {

using profiles::job_size;
using profiles::model_state;

namespace {

job_size size_of(const msg::job_spec& j) { return job_size{j.width, j.height, j.seconds}; }

std::string with_commas(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

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

profile_estimates::profile_estimates(const config::cluster& c, profiles::profile p)
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

double profile_estimates::handoff(const std::string& from_host, const sched::decoder_view& d,
                                  const msg::job_spec&) const {
  return p_.handoff(from_host == d.host).s;
}

double profile_estimates::decode(const sched::decoder_view& d, const msg::job_spec& j) const {
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
    c, from.empty() ? profiles::profile::reference() : profiles::profile::load(from));
}

// -- modes -----------------------------------------------------------------------------------

std::optional<config::mode> resolve_mode(const config::cluster& c, const std::string& name) {
  if (auto* m = c.find_mode(name))
    return *m;
  if (name != auto_mode)
    return std::nullopt;
  config::mode m;
  m.name = auto_mode;
  m.policy = "auto";
  for (auto& p : c.pools)
    m.pools.push_back(p.name);
  for (auto& d : c.decoders)
    m.decoders.push_back(d.name);
  return m;
}

std::string known_modes(const config::cluster& c) {
  std::string known;
  for (auto& m : c.modes)
    known += m.name + ", ";
  if (c.find_mode(auto_mode) == nullptr)
    known += auto_mode;
  else if (!known.empty())
    known.resize(known.size() - 2);
  return known;
}

// -- configure -------------------------------------------------------------------------------

void configure(sched::state& s, const config::cluster& c,
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
  s.mode_policy[auto_mode] = sched::make_policy("auto", est);
  for (auto& [mode, name] : policies) {
    auto pol = sched::make_policy(name, est);
    if (!pol)
      throw std::invalid_argument("unknown dispatch policy '" + name + "' for mode " + mode
                                  + " (known: in_turn, first_free, auto)");
    s.mode_policy[mode] = pol;
  }
  if (s.idx.built)
    sched::reindex(s);
}

// -- plan ------------------------------------------------------------------------------------

std::string capacity_refusal(const sched::state& s, const std::string& mode, uint32_t width,
                             uint32_t height, uint32_t seconds) {
  auto m = s.modes.find(mode);
  if (m == s.modes.end())
    return "unknown mode '" + mode + "'";
  sched::job probe;
  probe.spec.width = width;
  probe.spec.height = height;
  probe.spec.seconds = seconds;
  std::string limits;
  for (auto& name : m->second) {
    auto p = s.pools.find(name);
    if (p == s.pools.end())
      continue;
    if (sched::pool_may_take(p->second, probe))
      return "";
    limits += (limits.empty() ? "" : ", ") + name + " (" + p->second.kind + ") holds up to "
              + (p->second.max_load ? with_commas(*p->second.max_load) : "?");
  }
  return "no pool of mode " + mode + " can hold " + std::to_string(width) + "x"
         + std::to_string(height) + ", " + std::to_string(seconds) + " s (load "
         + with_commas(sched::job_load(probe.spec)) + " = width x height x seconds): "
         + (limits.empty() ? "the mode has no pools" : limits);
}

std::string shot_label(std::size_t i, const msg::shot& s) {
  return "shot " + std::to_string(i + 1) + (s.name.empty() ? "" : " (" + s.name + ")");
}

std::string shot_stem(const msg::shot& s, uint32_t take) {
  if (s.name.empty())
    return "";
  return s.takes <= 1 ? s.name : s.name + "-take-" + std::to_string(take + 1);
}

std::string shot_problem(const msg::shot& s, const config::knobs& k) {
  if (s.width == 0 || s.width > 8192 || s.width % 8 != 0)
    return "width: must be a multiple of 8 from 8 to 8192, got " + std::to_string(s.width);
  if (s.height == 0 || s.height > 8192 || s.height % 8 != 0)
    return "height: must be a multiple of 8 from 8 to 8192, got " + std::to_string(s.height);
  if (s.seconds == 0 || s.seconds > 3600)
    return "seconds: must be from 1 to 3600, got " + std::to_string(s.seconds);
  if (s.takes == 0 || s.takes > max_takes)
    return "takes: must be from 1 to " + std::to_string(max_takes) + ", got "
           + std::to_string(s.takes);
  if (s.seed > UINT64_MAX - (s.takes - 1))
    return "seed: " + std::to_string(s.seed) + " with " + std::to_string(s.takes)
           + " takes: the last take's seed would pass 2^64-1";
  if (s.prompt.empty())
    return "prompt: is empty";
  if (s.prompt.size() > k.max_prompt_bytes)
    return "prompt: is " + std::to_string(s.prompt.size()) + " bytes, over knobs.max_prompt_bytes ("
           + std::to_string(k.max_prompt_bytes) + ")";
  if (!text::is_valid_utf8(s.prompt))
    return "prompt: is not valid UTF-8";
  if (s.negative_prompt.size() > k.max_prompt_bytes)
    return "negative_prompt: is " + std::to_string(s.negative_prompt.size())
           + " bytes, over knobs.max_prompt_bytes (" + std::to_string(k.max_prompt_bytes) + ")";
  if (!text::is_valid_utf8(s.negative_prompt))
    return "negative_prompt: is not valid UTF-8";
  for (auto& i : s.inputs)
    if (auto why = actors::inbound::check_reference(i.path); !why.empty())
      return "inputs." + i.name + ": " + why;
  if (auto why = actors::inbound::check_reference(s.reference); !why.empty())
    return "reference: " + why;
  if (!s.reference_sha256.empty() && !is_sha256_hex(s.reference_sha256))
    return "reference_sha256: is not 64 lowercase hex digits";
  if (!s.name.empty()) {
    if (!files::is_safe_name(s.name, max_shot_name))
      return "name: is not a safe file stem (1-64 of A-Z a-z 0-9 _ . -, not starting with . or -)";
    if (s.name.compare(0, 4, "job-") == 0)  // safe: its characters were checked
      return "name: '" + s.name + "' starts with \"job-\", kept for unnamed outputs";
  }
  return "";
}

std::string shots_problem(const std::vector<msg::shot>& shots, const config::knobs& k,
                          uint64_t max_jobs) {
  if (shots.empty())
    return "the shot list is empty";
  uint64_t total = 0;
  std::set<std::string> names, stems;
  for (std::size_t i = 0; i < shots.size(); ++i) {
    const auto& s = shots[i];
    if (auto why = shot_problem(s, k); !why.empty())
      return shot_label(i, s) + ": " + why;
    total += s.takes;
    if (total > max_jobs)
      return shot_label(i, s) + ": takes: the list's takes add up to more than "
             + std::to_string(max_jobs) + " jobs";
    if (s.name.empty())
      continue;
    if (!names.insert(s.name).second)
      return shot_label(i, s) + ": name: '" + s.name + "' is used by an earlier shot";
    for (uint32_t t = 0; t < s.takes; ++t)
      if (!stems.insert(shot_stem(s, t)).second)
        return shot_label(i, s) + ": name: output '" + shot_stem(s, t)
               + "' is also another shot's output";
  }
  return config::graph::graph_problem(shots, [&](std::size_t i) { return shot_label(i, shots[i]); });
}

std::vector<msg::job_spec> shot_jobs(const std::vector<msg::shot>& shots,
                                     const std::string& run_id, const std::string& reference,
                                     const std::string& reference_sha256,
                                     const config::catalog* cat,
                                     bool critical_path_first) {
  std::vector<std::size_t> order(shots.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  // Among equal priorities, a shot that starts a longer chain of shots goes first
  // (critical path first: config/shot_graph.hpp).
  const bool graph = critical_path_first && config::graph::has_graph(shots);
  const auto rank = graph ? config::graph::shot_ranks(shots) : std::vector<double>(shots.size());
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (shots[a].priority != shots[b].priority)
      return shots[a].priority > shots[b].priority;
    return rank[a] > rank[b];
  });
  std::vector<msg::job_spec> out;
  std::vector<std::size_t> shot_of;
  std::vector<uint32_t> takes;
  for (std::size_t i : order) {
    const auto& s = shots[i];
    for (uint32_t t = 0; t < s.takes; ++t) {
      msg::job_spec j;
      j.run_id = run_id;
      j.index = static_cast<uint32_t>(out.size());
      j.seed = s.seed + t;
      j.width = s.width;
      j.height = s.height;
      j.seconds = s.seconds;
      j.prompt = s.prompt;
      // A shot without a reference of its own (no path, no digest) takes the run's.
      const bool own = !s.reference.empty() || !s.reference_sha256.empty();
      j.reference = own ? s.reference : reference;
      j.reference_sha256 = own ? s.reference_sha256 : reference_sha256;
      j.name = shot_stem(s, t);
      j.negative_prompt = s.negative_prompt;
      j.shot = s.name;
      j.take = t;
      j.sequence = s.sequence;
      if (cat != nullptr) {
        config::resolved_shot r;
        if (resolve_run_shot(*cat, s, reference, reference_sha256, r).empty())
          config::apply_resolved(r, j);
      }
      out.push_back(std::move(j));
      shot_of.push_back(i);
      takes.push_back(t);
    }
  }
  config::graph::link_jobs(out, shots, shot_of, takes);
  return out;
}

std::string shots_capacity_refusal(const sched::state& s, const std::string& mode,
                                   const std::vector<msg::shot>& shots) {
  for (std::size_t i = 0; i < shots.size(); ++i)
    if (auto why = capacity_refusal(s, mode, shots[i].width, shots[i].height, shots[i].seconds);
        !why.empty())
      return shot_label(i, shots[i]) + ": " + why;
  return "";
}

sched::state initial_state(const config::cluster& c, double time_scale) {
  sched::state s;
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
    sched::pool_view v;
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
    sched::decoder_view v;
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

void configure_dispatch(sched::state& s, const config::cluster& c) {
  std::shared_ptr<const profile_estimates> est;
  try {
    est = estimates_for(c);
  } catch (const profiles::profile_error& e) {
    // The sim backends refuse such a profile at preflight; a line of other backends still
    // gets limits and auto's estimates from the reference measurements.
    spdlog::error("coordinator: cannot read the timing profile ({}); capacity limits and "
                  "auto's estimates come from the embedded reference profile", e.what());
    est = std::make_shared<profile_estimates>(c, profiles::profile::reference());
  }
  std::map<std::string, std::string> policies;
  for (auto& m : c.modes)
    policies[m.name] = m.policy;
  configure(s, c, est, policies);
}

} // namespace vidline::dispatching
