/// The shot-model fields of a shot line (docs/shots.md): negative_prompt, workflow, params
/// and named inputs. Inputs are files beside the list, read as `reference` is.

#include <filesystem>

#include <nlohmann/json.hpp>

#include "nodes/verbs/shot_file.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

std::string read_shot_model(const json& j, const std::string& folder, msg::shot& s) {
  if (j.contains("negative_prompt")) {
    if (!j["negative_prompt"].is_string())
      return "negative_prompt: must be a string";
    s.negative_prompt = j["negative_prompt"].get<std::string>();
  }
  if (j.contains("workflow")) {
    if (!j["workflow"].is_string() || j["workflow"].get<std::string>().empty())
      return "workflow: must be a workflow's name (a string)";
    s.workflow = j["workflow"].get<std::string>();
  }
  if (j.contains("params"))
    if (auto why = config::params_from_json(j["params"], s.params); !why.empty())
      return why;
  if (!j.contains("inputs"))
    return "";
  const json& in = j["inputs"];
  if (!in.is_object())
    return "inputs: must be an object of named files ({\"first_frame\": \"a.png\"})";
  for (auto& [name, v] : in.items()) {
    msg::job_input i;
    if (auto why = config::input_from_json(name, v, true, i); !why.empty())
      return "inputs." + name + ": " + why;
    if (!i.path.empty()) {
      auto p = std::filesystem::path(i.path);
      if (p.is_relative())
        p = std::filesystem::path(folder) / p;
      std::string abs, sha;
      if (auto why = read_reference(p.string(), abs, sha); !why.empty())
        return "inputs." + name + ": " + why;
      i.path = abs;
      i.sha256 = sha;
    }
    s.inputs.push_back(std::move(i));
  }
  return "";
}

} // namespace vidline::nodes::verbs
