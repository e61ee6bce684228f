#pragma once
/// Admission of shots: how what a submit says of each shot (workflow, params, named inputs,
/// negative prompt) becomes what its jobs carry, checked against the workflows the run's
/// pools declare (config/workflows.hpp). Used by the coordinator's submit and add-jobs, the
/// planner, and the checks before them. Pure: no file, clock or socket.
///
/// Each step is a function of its own, so further shot fields (inputs taken from another
/// shot, sequences, job keys) extend admission without reshaping it.

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "config/workflows.hpp"
#include "messages/messages.hpp"

namespace vidline::dispatching {

/// The workflows a run of `mode` may name: those of the mode's pools' backends (every pool
/// of the cluster for "auto" or an unknown mode).
config::catalog run_catalog(const config::cluster& c, const std::string& mode);

/// Resolves one shot of a run: the run's reference (`run_reference`, `run_reference_sha256`,
/// "" = none) goes to a shot without one of its own whose workflow takes a `reference`.
/// "" or "FIELD: why" (config::resolve_shot).
std::string resolve_run_shot(const config::catalog& cat, const msg::shot& s,
                             const std::string& run_reference,
                             const std::string& run_reference_sha256, config::resolved_shot& out);

/// "" when every shot's workflow, params and inputs are accepted, else the first refusal as
/// "shot N (name): FIELD: why".
std::string shots_workflow_problem(const config::catalog& cat, const std::vector<msg::shot>& shots,
                                   const std::string& run_reference,
                                   const std::string& run_reference_sha256);

/// "" when the uniform form (a prompt and a count) fits the default workflow (which must
/// not require an input other than `reference`, nor a param), else why.
std::string uniform_workflow_problem(const config::catalog& cat, const std::string& reference,
                                     const std::string& reference_sha256);

/// Gives a uniform job the default workflow (with its defaults) and inputs.reference.
void resolve_uniform_job(const config::catalog& cat, msg::job_spec& j);

/// "" when the outputs of shots added to run `r` (their names with takes) are not already
/// outputs of the run, else "shot N (name): name: ..." for the first that is.
std::string added_names_problem(const sched::run& r, const std::vector<msg::shot>& shots);

/// Jobs journaled before workflows existed get their run's default workflow and model (no
/// other field changes), so every job's ident is defined.
void name_default_workflows(const config::cluster& c, std::deque<sched::run>& runs);

/// Every input digest a request names (the run's reference, each shot's inputs).
std::vector<std::string> input_digests(const std::vector<msg::shot>& shots,
                                       const std::string& run_reference_sha256);

/// Sets each input's `bytes` (and reference_bytes) from `sizes` (digest -> bytes).
void set_input_sizes(msg::job_spec& j, const std::map<std::string, uint64_t>& sizes);

/// The videos of a client's collection folder offered with a submit
/// (msg::submit_run::collected), by job key into `out` (run::collected): "" or why the
/// submit is refused ("collected[I]: FIELD: why"; at most graph::max_collected_outputs).
std::string collected_outputs(const std::vector<msg::collected_output>& offered,
                              std::map<std::string, sched::held_output>& out);

} // namespace vidline::dispatching
