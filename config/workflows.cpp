#include "config/workflows.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/sha256.hpp"
#include "config/shot_graph.hpp"
#include "config/shot_identity.hpp"

namespace vidline::config {

using nlohmann::json;

const workflow_param* workflow::find_param(const std::string& n) const {
  for (auto& p : params)
    if (p.name == n)
      return &p;
  return nullptr;
}

const workflow_input* workflow::find_input(const std::string& n) const {
  for (auto& i : inputs)
    if (i.name == n)
      return &i;
  return nullptr;
}

const std::vector<std::string>& param_types() {
  static const std::vector<std::string> t{"string", "integer", "number", "boolean"};
  return t;
}

std::vector<workflow> workflows_of(const backend& b) {
  if (!b.workflows.empty())
    return b.workflows;
  workflow w;
  w.name = implicit_workflow;
  w.model = b.name;
  w.inputs.push_back({"reference", false});
  w.is_default = true;
  return {w};
}

const workflow* catalog::find(const std::string& name) const {
  for (auto& w : workflows)
    if (w.name == name)
      return &w;
  return nullptr;
}

std::string catalog::names() const {
  std::string out;
  for (auto& w : workflows)
    out += (out.empty() ? "" : ", ") + w.name;
  return out;
}

catalog catalog_for(const cluster& c, const std::vector<std::string>& pools) {
  std::vector<const backend*> order;
  auto add = [&](const std::string& backend_name) {
    const backend* b = c.find_backend(backend_name);
    if (b != nullptr && std::find(order.begin(), order.end(), b) == order.end())
      order.push_back(b);
  };
  if (pools.empty())
    for (auto& p : c.pools)
      add(p.backend);
  for (auto& name : pools)
    if (const pool* p = c.find_pool(name))
      add(p->backend);
  if (order.empty() && !c.backends.empty())
    order.push_back(&c.backends.begin()->second);
  catalog cat;
  for (std::size_t k = 0; k < order.size(); ++k)
    for (auto& w : workflows_of(*order[k])) {
      if (k == 0 && w.is_default && cat.default_name.empty())
        cat.default_name = w.name;
      if (cat.find(w.name) == nullptr)
        cat.workflows.push_back(w);
    }
  if (cat.default_name.empty() && !cat.workflows.empty())
    cat.default_name = cat.workflows.front().name;
  return cat;
}

namespace {

bool safe_field_name(const std::string& n) {
  if (n.empty() || n.size() > 64 || n.front() == '.' || n.front() == '-')
    return false;
  return std::all_of(n.begin(), n.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
           || ch == '_' || ch == '-' || ch == '.';
  });
}

std::string param_names(const workflow& w) {
  std::string out;
  for (auto& p : w.params)
    out += (out.empty() ? "" : ", ") + p.name;
  return out.empty() ? "none" : out;
}

std::string input_names(const workflow& w) {
  std::string out;
  for (auto& i : w.inputs)
    out += (out.empty() ? "" : ", ") + i.name + (i.required ? " (required)" : "");
  return out.empty() ? "none" : out;
}

std::string choices_text(const workflow_param& d) {
  std::string out;
  for (auto& c : d.choices)
    out += (out.empty() ? "" : ", ") + c.dump();
  return out;
}

bool is_hex64(const std::string& s) { return is_sha256_hex(s); }

/// A bound as a person writes it: 1, not 1.0.
std::string bound_text(double x) {
  if (std::floor(x) == x && std::fabs(x) < 1e15)
    return std::to_string(static_cast<long long>(x));
  return json(x).dump();
}

/// A value given for `d` (already typed, or as text to read as d's type): "" and `out`
/// canonical, or why not.
std::string check_param(const workflow_param& d, const msg::param_value& given, bool as_text,
                        msg::param_value& out) {
  json v;
  if (as_text && d.type != "string") {
    v = json::parse(given.text, nullptr, false);
    if (v.is_discarded())
      v = given.text;
  } else {
    v = param_json(given);
  }
  auto typed = param_of(d.name, v);
  if (!typed)
    return "must be a " + d.type;
  const std::string& t = typed->type;
  const bool ok = t == d.type || (d.type == "number" && t == "integer");
  if (!ok)
    return "must be " + std::string(d.type == "integer" ? "an " : "a ") + d.type + ", got "
           + (t == "string" ? "the string " + v.dump() : t + " " + typed->text);
  if (d.type == "integer" || d.type == "number") {
    const double x = v.get<double>();
    if (!std::isfinite(x))
      return "must be a finite number";
    if ((d.min && x < *d.min) || (d.max && x > *d.max))
      return "must be from " + (d.min ? bound_text(*d.min) : std::string("-inf")) + " to "
             + (d.max ? bound_text(*d.max) : std::string("+inf")) + ", got " + typed->text;
  }
  if (!d.choices.empty()
      && std::none_of(d.choices.begin(), d.choices.end(), [&](const json& c) { return c == v; }))
    return "must be one of " + choices_text(d) + ", got " + v.dump();
  out = *typed;
  return "";
}

} // namespace

std::string params_from_json(const json& j, std::vector<msg::param_value>& out) {
  out.clear();
  if (!j.is_object())
    return "params: must be an object of named values ({\"steps\": 30}), got "
           + std::string(j.type_name());
  for (auto& [name, v] : j.items()) {
    if (!safe_field_name(name))
      return "params." + name + ": not a parameter name (1-64 of A-Z a-z 0-9 _ . -)";
    auto p = param_of(name, v);
    if (!p)
      return "params." + name + ": must be a string, number or boolean, got "
             + std::string(v.type_name());
    out.push_back(std::move(*p));
  }
  return "";
}

std::string input_from_json(const std::string& name, const json& j, bool allow_path,
                            msg::job_input& out) {
  out = {};
  out.name = name;
  if (!safe_field_name(name))
    return "not an input name (1-64 of A-Z a-z 0-9 _ . -)";
  if (j.is_string()) {
    if (!allow_path)
      return "give {\"sha256\": ...} of an input uploaded with PUT /v1/inputs/{sha256}";
    out.path = j.get<std::string>();
    if (out.path.empty())
      return "must name a file";
    return "";
  }
  if (j.is_object() && j.contains("from"))  // taken from another shot (shot_graph.hpp)
    return graph::from_input_json(name, j, out);
  if (j.is_object()) {
    for (auto& [k, v] : j.items())
      if (k != "sha256")
        return "unknown field '" + k + "' (an input is a path or {\"sha256\": ...})";
    if (!j.contains("sha256") || !j["sha256"].is_string() || !is_hex64(j["sha256"].get<std::string>()))
      return "sha256: must be 64 lowercase hex digits (an input uploaded first)";
    out.sha256 = j["sha256"].get<std::string>();
    return "";
  }
  return "must be a file's path or {\"sha256\": ...}, got " + std::string(j.type_name());
}

std::string resolve_shot(const catalog& cat, const msg::shot& s, resolved_shot& out,
                         bool params_as_text) {
  out = {};
  const std::string wname = s.workflow.empty() ? cat.default_name : s.workflow;
  const workflow* w = cat.find(wname);
  if (w == nullptr)
    return s.workflow.empty()
             ? "workflow: the cluster declares no default workflow"
             : "workflow: unknown workflow '" + s.workflow + "' (declared: " + cat.names() + ")";
  out.workflow = w->name;
  out.model = w->model;
  std::set<std::string> given;
  for (auto& p : s.params) {
    const std::string field = "params." + p.name;
    if (!given.insert(p.name).second)
      return field + ": given twice";
    const workflow_param* d = w->find_param(p.name);
    if (d == nullptr)
      return field + ": workflow '" + w->name + "' has no such parameter (its parameters: "
             + param_names(*w) + ")";
    msg::param_value v;
    if (auto why = check_param(*d, p, params_as_text, v); !why.empty())
      return field + ": " + why;
    out.params.push_back(std::move(v));
  }
  for (auto& d : w->params) {
    if (given.count(d.name))
      continue;
    if (d.required)
      return "params." + d.name + ": required by workflow '" + w->name + "'";
    if (d.default_value.is_null())
      continue;
    if (auto v = param_of(d.name, d.default_value))
      out.params.push_back(std::move(*v));
  }
  std::sort(out.params.begin(), out.params.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });

  out.inputs = s.inputs;
  if (!s.reference.empty() || !s.reference_sha256.empty()) {
    for (auto& i : s.inputs)
      if (i.name == "reference")
        return "reference: given twice (as reference and as inputs.reference)";
    msg::job_input r;
    r.name = "reference";
    r.path = s.reference;
    r.sha256 = s.reference_sha256;
    out.inputs.push_back(std::move(r));
  }
  std::set<std::string> names;
  for (auto& i : out.inputs) {
    const std::string field = "inputs." + i.name;
    if (!safe_field_name(i.name))
      return field + ": not an input name (1-64 of A-Z a-z 0-9 _ . -)";
    if (!names.insert(i.name).second)
      return field + ": given twice";
    const workflow_input* d = w->find_input(i.name);
    if (d == nullptr)
      return field + ": workflow '" + w->name + "' takes no such input (its inputs: "
             + input_names(*w) + ")";
    if (i.latent && !d->latent)
      return field + ": latent: workflow '" + w->name + "' does not continue from a latent "
             "here (its config declares no \"latent\": true on input " + i.name
             + "); take a frame (\"frame\": \"last\")";
    if (d->latent && !i.latent)
      return field + ": workflow '" + w->name + "' continues from another shot's latent here: "
             "{\"from\": \"SHOT\", \"latent\": true}, not a file or a frame";
    if (!i.sha256.empty() && !is_hex64(i.sha256))
      return field + ": sha256 must be 64 lowercase hex digits";
    if (i.sha256.empty() && i.path.empty() && i.from.empty())
      return field + ": names no file (a path or {\"sha256\": ...})";
  }
  for (auto& d : w->inputs)
    if (d.required && !names.count(d.name))
      return "inputs." + d.name + ": required by workflow '" + w->name + "'";
  std::sort(out.inputs.begin(), out.inputs.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return "";
}

void apply_resolved(const resolved_shot& r, msg::job_spec& j) {
  j.workflow = r.workflow;
  j.model = r.model;
  j.params = r.params;
  j.inputs = r.inputs;
  for (auto& i : j.inputs)
    if (i.name == "reference") {
      j.reference = i.path;
      j.reference_sha256 = i.sha256;
    }
}

std::string resolve_uniform(const catalog& cat, const std::string& reference,
                            const std::string& reference_sha256, resolved_shot& out) {
  msg::shot s;
  s.reference = reference;
  s.reference_sha256 = reference_sha256;
  return resolve_shot(cat, s, out);
}

} // namespace vidline::config
