#pragma once
/// Workflows: which a backend offers (declared in the config, or the one implicit default),
/// and the ONE check of a shot's workflow, params and inputs against them, with defaults
/// applied. The CLI's shot-list reader, the HTTP API and the coordinator's admission all
/// call resolve_shot, so a shot is refused alike wherever it enters (docs/shots.md).
///
/// Pure: no file, clock or socket.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "config/workflow.hpp"
#include "messages/messages.hpp"

namespace vidline::config {

/// The name of the workflow a backend without `workflows` offers.
inline constexpr const char* implicit_workflow = "default";

/// The parameter types a workflow may declare.
const std::vector<std::string>& param_types();

/// A backend's workflows: those it declares, else one implicit default: named "default",
/// model = the backend's name, no params, input `reference` optional.
std::vector<workflow> workflows_of(const backend& b);

/// The workflows a run's shots may name.
struct catalog {
  std::vector<workflow> workflows;  ///< in the order found (first declaration of a name wins)
  std::string default_name;         ///< the workflow a shot without one gets

  const workflow* find(const std::string& name) const;
  /// "a, b, c": the names, for messages.
  std::string names() const;
};

/// The catalog of a run whose jobs may go to `pools` (names; empty = every pool of the
/// cluster): the workflows of those pools' backends in pool order; the default is that of
/// the first pool's backend. A cluster without pools gets its first backend's.
catalog catalog_for(const cluster& c, const std::vector<std::string>& pools = {});

/// A shot's workflow, params and inputs as its jobs carry them.
struct resolved_shot {
  std::string workflow;
  std::string model;
  std::vector<msg::param_value> params;  ///< after defaults, ascending by name
  std::vector<msg::job_input> inputs;    ///< `reference` included, ascending by name
};

/// Checks a shot's workflow, params and inputs against `cat`, applies the workflow's
/// defaults and folds the `reference` shorthand into inputs.reference. Returns "" and fills
/// `out`, or "FIELD: what is wrong" naming the field: "workflow", "params.NAME",
/// "inputs.NAME", "reference". With `params_as_text` each param's `text` is read as the
/// declared type (CSV cells: "30" for an integer, "true" for a boolean).
std::string resolve_shot(const catalog& cat, const msg::shot& s, resolved_shot& out,
                         bool params_as_text = false);

/// A shot's params from a JSON object ({"steps": 30, "lora": "x"}), or "params[.NAME]: why".
std::string params_from_json(const nlohmann::json& j, std::vector<msg::param_value>& out);

/// One input from JSON: a path (string) or {"sha256": "<64 hex>"}. Returns "" or why not
/// (without the field name). `allow_path` false refuses paths (the HTTP API's shots).
std::string input_from_json(const std::string& name, const nlohmann::json& j, bool allow_path,
                            msg::job_input& out);

/// Fills a job from its shot's resolution: workflow, model, params, inputs, and the
/// `reference` fields mirroring inputs.reference for older readers.
void apply_resolved(const resolved_shot& r, msg::job_spec& j);

/// The job's workflow, model and input `reference`, when admitted without a shot (the
/// uniform form: a prompt and a count): the catalog's default workflow with its defaults.
/// "" or why the default workflow refuses such a job (e.g. it requires an input).
std::string resolve_uniform(const catalog& cat, const std::string& reference,
                            const std::string& reference_sha256, resolved_shot& out);

} // namespace vidline::config
