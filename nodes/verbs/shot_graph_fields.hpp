#pragma once
/// A shot line's graph fields (docs/shots.md, "Shots that follow shots"): `sequence` and the
/// inputs taken from another shot, `"inputs": {"first_frame": {"from": "a", "frame": "last"}}`.

#include <string>

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::nodes {

/// True when `v`, an entry of a shot line's `inputs`, is taken from another shot.
bool is_from_input(const nlohmann::json& v);

/// Reads `sequence` and each entry of `inputs` taken from another shot into `s` ("" done,
/// else "FIELD: what is wrong"). Entries that are files are left to the caller.
std::string read_graph_fields(const nlohmann::json& j, msg::shot& s);

} // namespace vidline::nodes
