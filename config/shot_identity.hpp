#pragma once
/// What a job's output is determined by, as text and digests anyone can recompute: the sim
/// contract's `ident` (version 2: the prompt, negative prompt, workflow, model, params and
/// input digests) and the job key (the ident plus seed, size and length), under which an
/// output already made is found again and reused (docs/sim-contract.md, docs/shots.md).
///
/// Pure: no file, clock or socket; the machines, the backends and the CLI use it alike.

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/digest.hpp"
#include "messages/messages.hpp"

namespace vidline::config {

/// A number that is not an integer as JSON writes it in shortest round-trip form, the way
/// Python's json and repr do (0.1, 2.5, 1e-07, 1000000000000000.0, 1e+16).
std::string number_text(double v);

/// The canonical text of a param value: a string as it is; `true` / `false`; an integer
/// in decimal; any other number in JSON's shortest round-trip form (0.1, 2.5, 1e-07).
/// Returns the value's type name ("string" | "integer" | "number" | "boolean") with it;
/// nullopt for null, arrays and objects (not a param value).
std::optional<msg::param_value> param_of(const std::string& name, const nlohmann::json& value);

/// The param's value back as JSON (for `worker` requests, ComfyUI templates, the status).
nlohmann::json param_json(const msg::param_value& p);

/// The ident's text: one line per field, each ending in "\n", params and inputs in
/// ascending byte order of their names. Inputs whose digest is not known yet are written
/// with an empty digest: such a job has no final ident (see `inputs_known`).
std::string ident_text(const msg::job_spec& job);

/// SHA-256 of ident_text: the 32 bytes a sim latent's blocks end with.
vidline::digest ident(const msg::job_spec& job);

/// True when every input's digest is known (none still waits for another shot's output).
bool inputs_known(const msg::job_spec& job);

/// The job key (hex): SHA-256 of "vidline-job-key 1\n", the ident's hex, seed, size and
/// length, one line each. "" while an input's digest is not known.
std::string job_key(const msg::job_spec& job);

} // namespace vidline::config
