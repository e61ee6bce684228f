#pragma once
/// A workflow a backend declares (docs/config.md, "Workflows"): what a shot may ask of it by
/// name: the model it needs, its parameters (type, range or choices, default) and its named
/// inputs (required or optional). Plain data; the checks of a shot against it are in
/// config/workflows.hpp.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::config {

/// One parameter of a workflow.
struct workflow_param {
  std::string name;
  std::string type;                   ///< "string" | "integer" | "number" | "boolean"
  std::optional<double> min, max;     ///< integer and number only (inclusive)
  std::vector<nlohmann::json> choices;  ///< empty = any value of the type
  nlohmann::json default_value;       ///< null = none: left out when a shot does not give it
  bool required = false;              ///< a shot must give it (no default)
};

/// One named input file of a workflow ("reference", "first_frame", "last_frame", ...).
struct workflow_input {
  std::string name;
  bool required = false;
  /// The workflow continues from a latent here: the input is another shot's latent itself,
  /// handed over (`{"from": NAME, "latent": true}`), never an image or a frame.
  bool latent = false;
};

/// A named way of making a shot.
struct workflow {
  std::string name;
  std::string model;                  ///< the model key it needs, e.g. "h3-fl2v-int8"
  std::vector<workflow_param> params;  ///< ascending by name
  std::vector<workflow_input> inputs;  ///< ascending by name
  bool is_default = false;            ///< the one a shot without `workflow` gets
  /// comfyui: the sampling workflow template of this workflow (absolute after loading;
  /// "" = the backend's `sample_workflow`).
  std::string template_file;

  const workflow_param* find_param(const std::string& n) const;
  const workflow_input* find_input(const std::string& n) const;
};

} // namespace vidline::config
