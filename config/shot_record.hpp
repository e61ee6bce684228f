#pragma once
/// What an output was made from, as the status JSON, the run index (index.jsonl) and the
/// API write it for each job, so someone who finds a video later can make it again: the
/// workflow, its model key, the params after defaults, each input's digest, the negative
/// prompt's digest, the sim contract's ident and the vidline version (docs/shots.md).
///
/// Pure: no file, clock or socket.

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::config {

/// This build's version (the project version in CMakeLists.txt).
const char* vidline_version();

/// The record's fields: workflow, model (null when none), params {name: value}, inputs
/// {name: sha256 or null while not made}, negative_prompt_sha256, ident (hex),
/// vidline_version. Merged into a job's object by its writers.
nlohmann::json shot_record(const msg::job_spec& j);

} // namespace vidline::config
