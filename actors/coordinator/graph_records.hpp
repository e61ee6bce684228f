#pragma once
/// The graph fields of a job's spec (inputs, shot, take, key, sequence) as the journal
/// stores them (records.cpp's spec record): written only when set, read back with
/// defaults, so a journal older than shot graphs reads as before. Pure: no I/O.

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::actors {

void put_graph_fields(nlohmann::json& out, const msg::job_spec& s);
void get_graph_fields(const nlohmann::json& in, msg::job_spec& s);

} // namespace vidline::actors

namespace vidline::actors {

/// A job's graph fields in the status (docs/sim-contract.md): shot, take, key (null until
/// its inputs are known), sequence, and its inputs (name, sha256 or null, from, frame).
void put_graph_status(nlohmann::json& job, const msg::job_spec& s);

} // namespace vidline::actors

namespace vidline::sched { struct run; }

namespace vidline::actors {

/// The run's sequences in the status: [{name, done, parts: [{index, name, output,
/// output_sha256, decoder}]}] in part order; `done` once every part has its video (only
/// sequences of a run that has some).
void put_sequences_status(nlohmann::json& status, const sched::run& r);

} // namespace vidline::actors
