#pragma once
/// A shot's `sequence` as a shot line or the API gives it (docs/shots.md, "Sequences").
/// Inputs taken from other shots are read with the other inputs (config::input_from_json,
/// config/shot_graph.hpp).

#include <string>

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::nodes::verbs {

/// Reads `sequence` into `s`: "" done, else "sequence: what is wrong".
std::string read_graph_fields(const nlohmann::json& j, msg::shot& s);

} // namespace vidline::nodes::verbs
