#include "actors/coordinator/admission.hpp"

#include <algorithm>
#include <set>

#include "actors/coordinator/graph.hpp"
#include "actors/inbound.hpp"
#include "common/digest.hpp"
#include "common/names.hpp"
#include "common/text.hpp"
#include "config/shot_graph.hpp"

namespace vidline::actors::coordinator {

namespace {

std::string with_commas(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

} // namespace

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

// -- workflows -------------------------------------------------------------------------------


config::catalog run_catalog(const config::cluster& c, const std::string& mode) {
  const config::mode* m = c.find_mode(mode);
  return config::catalog_for(c, m != nullptr ? m->pools : std::vector<std::string>{});
}

std::string resolve_run_shot(const config::catalog& cat, const msg::shot& s,
                             const std::string& run_reference,
                             const std::string& run_reference_sha256, config::resolved_shot& out) {
  const bool own = !s.reference.empty() || !s.reference_sha256.empty();
  bool in_inputs = false;
  for (auto& i : s.inputs)
    in_inputs = in_inputs || i.name == "reference";
  const bool run_has = !run_reference.empty() || !run_reference_sha256.empty();
  if (!own && !in_inputs && run_has) {
    const config::workflow* w = cat.find(s.workflow.empty() ? cat.default_name : s.workflow);
    if (w != nullptr && w->find_input("reference") != nullptr) {
      msg::shot with = s;
      with.reference = run_reference;
      with.reference_sha256 = run_reference_sha256;
      return config::resolve_shot(cat, with, out);
    }
  }
  return config::resolve_shot(cat, s, out);
}

std::string shots_workflow_problem(const config::catalog& cat, const std::vector<msg::shot>& shots,
                                   const std::string& run_reference,
                                   const std::string& run_reference_sha256) {
  for (std::size_t i = 0; i < shots.size(); ++i) {
    config::resolved_shot r;
    if (auto why = resolve_run_shot(cat, shots[i], run_reference, run_reference_sha256, r);
        !why.empty())
      return shot_label(i, shots[i]) + ": " + why;
  }
  return "";
}

std::string uniform_workflow_problem(const config::catalog& cat, const std::string& reference,
                                     const std::string& reference_sha256) {
  config::resolved_shot r;
  return config::resolve_uniform(cat, reference, reference_sha256, r);
}

void resolve_uniform_job(const config::catalog& cat, msg::job_spec& j) {
  config::resolved_shot r;
  if (config::resolve_uniform(cat, j.reference, j.reference_sha256, r).empty()) {
    config::apply_resolved(r, j);
    return;
  }
  // Refused before admission (uniform_workflow_problem); a job journaled before workflows
  // existed still gets the default's name and model, so its ident is defined.
  if (const config::workflow* w = cat.find(cat.default_name)) {
    j.workflow = w->name;
    j.model = w->model;
  }
}

std::string added_names_problem(const run& r, const std::vector<msg::shot>& shots) {
  std::set<std::string> have;
  for (auto& j : r.jobs)
    if (!j.spec.name.empty())
      have.insert(j.spec.name);
  for (std::size_t i = 0; i < shots.size(); ++i)
    for (uint32_t t = 0; t < shots[i].takes; ++t)
      if (auto stem = shot_stem(shots[i], t); !stem.empty() && have.count(stem))
        return shot_label(i, shots[i]) + ": name: output '" + stem
               + "' is already an output of run " + r.id;
  return "";
}

void name_default_workflows(const config::cluster& c, std::deque<run>& runs) {
  for (auto& r : runs) {
    const config::catalog cat = run_catalog(c, r.mode);
    const config::workflow* w = cat.find(cat.default_name);
    for (auto& j : r.jobs)
      if (j.spec.workflow.empty() && w != nullptr) {
        j.spec.workflow = w->name;
        j.spec.model = w->model;
      }
  }
}

std::vector<std::string> input_digests(const std::vector<msg::shot>& shots,
                                       const std::string& run_reference_sha256) {
  std::vector<std::string> out;
  if (!run_reference_sha256.empty())
    out.push_back(run_reference_sha256);
  for (auto& s : shots) {
    if (!s.reference_sha256.empty())
      out.push_back(s.reference_sha256);
    for (auto& i : s.inputs)
      if (!i.sha256.empty())
        out.push_back(i.sha256);
  }
  return out;
}

void set_input_sizes(msg::job_spec& j, const std::map<std::string, uint64_t>& sizes) {
  for (auto& i : j.inputs)
    if (auto it = sizes.find(i.sha256); !i.sha256.empty() && it != sizes.end())
      i.bytes = it->second;
  if (auto it = sizes.find(j.reference_sha256); !j.reference_sha256.empty() && it != sizes.end())
    j.reference_bytes = it->second;
}

std::string collected_outputs(const std::vector<msg::collected_output>& offered,
                              std::map<std::string, held_output>& out) {
  if (offered.size() > coordinator::max_collected_outputs)
    return "collected: " + std::to_string(offered.size()) + " videos offered, at most "
           + std::to_string(coordinator::max_collected_outputs);
  for (std::size_t i = 0; i < offered.size(); ++i) {
    const auto& c = offered[i];
    const std::string at = "collected[" + std::to_string(i) + "]: ";
    if (!is_sha256_hex(c.key))
      return at + "key: not a SHA-256 in hex: '" + c.key + "'";
    if (!is_sha256_hex(c.output_sha256))
      return at + "output_sha256: not a SHA-256 in hex: '" + c.output_sha256 + "'";
    if (!names::is_safe_name(c.file))
      return at + "file: not a file name: '" + c.file + "'";
    out.emplace(c.key, held_output{c.file, c.output_sha256, c.decoder, c.run_id, c.index,
                                          true});
  }
  return "";
}

// -- shot lists and capacity ------------------------------------------------------------------

std::string capacity_refusal(const state& s, const std::string& mode, uint32_t width,
                             uint32_t height, uint32_t seconds) {
  auto m = s.modes.find(mode);
  if (m == s.modes.end())
    return "unknown mode '" + mode + "'";
  job probe;
  probe.spec.width = width;
  probe.spec.height = height;
  probe.spec.seconds = seconds;
  std::string limits;
  for (auto& name : m->second) {
    auto p = s.pools.find(name);
    if (p == s.pools.end())
      continue;
    if (coordinator::pool_may_take(p->second, probe))
      return "";
    limits += (limits.empty() ? "" : ", ") + name + " (" + p->second.kind + ") holds up to "
              + (p->second.max_load ? with_commas(*p->second.max_load) : "?");
  }
  return "no pool of mode " + mode + " can hold " + std::to_string(width) + "x"
         + std::to_string(height) + ", " + std::to_string(seconds) + " s (load "
         + with_commas(coordinator::job_load(probe.spec)) + " = width x height x seconds): "
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
    if (!names::is_safe_name(s.name, max_shot_name))
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

std::string shots_capacity_refusal(const state& s, const std::string& mode,
                                   const std::vector<msg::shot>& shots) {
  for (std::size_t i = 0; i < shots.size(); ++i)
    if (auto why = capacity_refusal(s, mode, shots[i].width, shots[i].height, shots[i].seconds);
        !why.empty())
      return shot_label(i, shots[i]) + ": " + why;
  return "";
}

} // namespace vidline::actors::coordinator
