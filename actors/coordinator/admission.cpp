#include "actors/coordinator/admission.hpp"

#include <set>

#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/coordinator/graph.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::dispatching {

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

std::string added_names_problem(const sched::run& r, const std::vector<msg::shot>& shots) {
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

void name_default_workflows(const config::cluster& c, std::deque<sched::run>& runs) {
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
                              std::map<std::string, sched::held_output>& out) {
  if (offered.size() > sched::graph::max_collected_outputs)
    return "collected: " + std::to_string(offered.size()) + " videos offered, at most "
           + std::to_string(sched::graph::max_collected_outputs);
  for (std::size_t i = 0; i < offered.size(); ++i) {
    const auto& c = offered[i];
    const std::string at = "collected[" + std::to_string(i) + "]: ";
    if (!is_sha256_hex(c.key))
      return at + "key: not a SHA-256 in hex: '" + c.key + "'";
    if (!is_sha256_hex(c.output_sha256))
      return at + "output_sha256: not a SHA-256 in hex: '" + c.output_sha256 + "'";
    if (!files::is_safe_name(c.file))
      return at + "file: not a file name: '" + c.file + "'";
    out.emplace(c.key, sched::held_output{c.file, c.output_sha256, c.decoder, c.run_id, c.index,
                                          true});
  }
  return "";
}

} // namespace vidline::dispatching
