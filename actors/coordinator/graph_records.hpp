#pragma once
/// Shots that follow shots in the status (docs/sim-contract.md): a job's key, sequence and
/// the inputs it takes from other shots; a run's sequences. Pure: no I/O.

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::actors::coordinator { struct run; }

namespace vidline::actors::coordinator {

/// A job's graph fields: key (null until its inputs are known), sequence (null: none),
/// takes_from [{input, from, from_index, frame}] (its inputs' digests are in `inputs`).
void put_graph_status(nlohmann::json& job, const msg::job_spec& s);

/// The run's sequences: [{name, done, parts: [{index, name, state, output, output_sha256,
/// decoder}]}] in part order; `done` once every part has its video (only for a run that
/// has sequences).
void put_sequences_status(nlohmann::json& status, const run& r);

} // namespace vidline::actors::coordinator
