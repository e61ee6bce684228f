/// JSON -> a backend's declared workflows, checked as they are read (names, types, ranges,
/// defaults within their own declaration, exactly one default), and back.

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "config/json_reader.hpp"
#include "config/schema.hpp"
#include "config/shot_identity.hpp"
#include "config/workflows.hpp"

namespace vidline::config::detail {

namespace {

workflow_param read_param(const std::string& name, const json& j, const std::string& path) {
  const object_reader r(j, path, {"type", "min", "max", "choices", "default", "required"});
  workflow_param p;
  p.name = name;
  check_name(name, path);
  p.type = r.string("type");
  check_one_of(p.type, param_types(), r.path_of("type"), "parameter type");
  const bool numeric = p.type == "integer" || p.type == "number";
  for (const char* k : {"min", "max"})
    if (r.has(k)) {
      if (!numeric)
        throw config_error(r.path_of(k), std::string("'") + k + "' applies to integer and number "
                                         "parameters, this one is a " + p.type);
      (std::string(k) == "min" ? p.min : p.max) = r.number(k);
    }
  if (p.min && p.max && *p.min > *p.max)
    throw config_error(r.path_of("min"), "is above max");
  if (r.has("choices")) {
    const json& c = r.required("choices");
    expect_array(c, r.path_of("choices"));
    if (c.empty())
      throw config_error(r.path_of("choices"), "must list at least one value");
    for (std::size_t i = 0; i < c.size(); ++i) {
      auto v = param_of(name, c[i]);
      if (!v || !(v->type == p.type || (p.type == "number" && v->type == "integer")))
        throw config_error(child(r.path_of("choices"), i), "must be a " + p.type);
      p.choices.push_back(c[i]);
    }
  }
  if (r.has("required")) {
    const json& q = r.required("required");
    if (!q.is_boolean())
      throw config_error(r.path_of("required"), "must be true or false, got " + type_name(q));
    p.required = q.get<bool>();
  }
  if (r.has("default")) {
    if (p.required)
      throw config_error(r.path_of("default"), "a required parameter has no default");
    // The default is held to the declaration like any value a shot gives.
    workflow w;
    w.name = "x";
    w.params.push_back(p);
    catalog cat;
    cat.workflows.push_back(w);
    cat.default_name = "x";
    msg::shot s;
    auto v = param_of(name, r.required("default"));
    if (!v)
      throw config_error(r.path_of("default"), "must be a " + p.type);
    s.params.push_back(*v);
    resolved_shot out;
    if (auto why = resolve_shot(cat, s, out); !why.empty())
      throw config_error(r.path_of("default"), why.substr(why.find(": ") + 2));
    p.default_value = r.required("default");
  }
  return p;
}

workflow read_workflow(const json& j, const std::string& path, const std::string& base_dir,
                       const std::string& type) {
  const object_reader r(j, path, {"name", "model", "params", "inputs", "default", "template"});
  workflow w;
  w.name = r.string("name");
  check_name(w.name, r.path_of("name"));
  w.model = r.string("model");
  check_name(w.model, r.path_of("model"));
  if (r.has("default")) {
    const json& d = r.required("default");
    if (!d.is_boolean())
      throw config_error(r.path_of("default"), "must be true or false, got " + type_name(d));
    w.is_default = d.get<bool>();
  }
  if (r.has("params")) {
    const json& ps = r.required("params");
    expect_object(ps, r.path_of("params"));
    for (auto& item : ps.items())  // nlohmann keeps them sorted by name
      w.params.push_back(read_param(item.key(), item.value(), child(r.path_of("params"), item.key())));
  }
  if (r.has("inputs")) {
    const json& is = r.required("inputs");
    expect_object(is, r.path_of("inputs"));
    for (auto& item : is.items()) {
      const std::string p = child(r.path_of("inputs"), item.key());
      check_name(item.key(), p);
      const object_reader ir(item.value(), p, {"required", "latent"});
      workflow_input in{item.key(), false, false};
      for (const char* k : {"required", "latent"})
        if (ir.has(k)) {
          const json& q = ir.required(k);
          if (!q.is_boolean())
            throw config_error(ir.path_of(k), "must be true or false, got " + type_name(q));
          (std::string(k) == "latent" ? in.latent : in.required) = q.get<bool>();
        }
      if (in.latent && in.name == "reference")
        throw config_error(ir.path_of("latent"), "'reference' is an image; name the input a "
                                                 "latent continues from otherwise (init_latent)");
      w.inputs.push_back(in);
    }
  }
  if (r.has("template")) {
    if (type != "comfyui")
      throw config_error(r.path_of("template"), "'template' applies only to backends of type "
                                                "'comfyui', this one is '" + type + "'");
    const std::string t = r.string("template");
    if (t.empty())
      throw config_error(r.path_of("template"), "must name a workflow file");
    std::filesystem::path p(t);
    if (p.is_relative() && !base_dir.empty())
      p = std::filesystem::path(base_dir) / p;
    w.template_file = p.lexically_normal().string();
  }
  return w;
}

} // namespace

std::vector<workflow> read_workflows(const json& j, const std::string& path,
                                     const std::string& base_dir, const std::string& type) {
  expect_array(j, path);
  if (j.empty())
    throw config_error(path, "must declare at least one workflow (leave \"workflows\" out for "
                             "the implicit default)");
  std::vector<workflow> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    auto w = read_workflow(j[i], child(path, i), base_dir, type);
    for (auto& o : out)
      if (o.name == w.name)
        throw config_error(child(child(path, i), "name"),
                           "workflow '" + w.name + "' is declared twice");
    out.push_back(std::move(w));
  }
  const auto defaults = std::count_if(out.begin(), out.end(), [](auto& w) { return w.is_default; });
  if (defaults > 1)
    throw config_error(path, "more than one workflow says \"default\": true");
  if (defaults == 0 && out.size() > 1)
    throw config_error(path, "several workflows and none says \"default\": true");
  if (defaults == 0)
    out.front().is_default = true;
  return out;
}

json workflows_to_json(const std::vector<workflow>& ws) {
  json out = json::array();
  for (auto& w : ws) {
    json j = {{"name", w.name}, {"model", w.model}, {"default", w.is_default}};
    if (!w.params.empty()) {
      json ps = json::object();
      for (auto& p : w.params) {
        json q = {{"type", p.type}};
        if (p.min) q["min"] = *p.min;
        if (p.max) q["max"] = *p.max;
        if (!p.choices.empty()) q["choices"] = p.choices;
        if (!p.default_value.is_null()) q["default"] = p.default_value;
        if (p.required) q["required"] = true;
        ps[p.name] = q;
      }
      j["params"] = ps;
    }
    if (!w.inputs.empty()) {
      json is = json::object();
      for (auto& i : w.inputs) {
        is[i.name] = {{"required", i.required}};
        if (i.latent)  // only when declared: configs without it keep their digest
          is[i.name]["latent"] = true;
      }
      j["inputs"] = is;
    }
    if (!w.template_file.empty())
      j["template"] = w.template_file;
    out.push_back(j);
  }
  return out;
}

} // namespace vidline::config::detail
