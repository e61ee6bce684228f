#pragma once
/// Admission of shots: how what a submit says of each shot (workflow, params, named inputs,
/// negative prompt) becomes what its jobs carry, checked against the workflows the run's
/// pools declare (config/workflows.hpp); the modes a submit may name, the checks of a shot
/// list and whether the mode's pools can hold its sizes. Used by the coordinator's machine
/// when it admits a submit (stepper_admission.cpp), the planner, and the CLI's checks.
/// Pure: no file, clock or socket.
///
/// Each step is a function of its own, so further shot fields (inputs taken from another
/// shot, sequences, job keys) extend admission without reshaping it.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "config/workflows.hpp"
#include "messages/messages.hpp"

namespace vidline::actors::coordinator {

/// The name of the mode that lets the coordinator choose: every pool and decoder of the
/// cluster, policy auto.
inline constexpr const char* auto_mode = "auto";

/// The mode `name` stands for, as every verb that takes a mode resolves it (`run` through
/// the coordinator's submit check, `plan` through configure, `preflight`, `start`): the
/// config's mode of that name, else for "auto" every pool and decoder of the cluster in
/// config order with policy auto; nullopt for any other name.
std::optional<config::mode> resolve_mode(const config::cluster& c, const std::string& name);

/// The mode names resolve_mode accepts, the config's then auto, as "a, b, auto".
std::string known_modes(const config::cluster& c);

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
std::string added_names_problem(const run& r, const std::vector<msg::shot>& shots);

/// Jobs journaled before workflows existed get their run's default workflow and model (no
/// other field changes), so every job's ident is defined.
void name_default_workflows(const config::cluster& c, std::deque<run>& runs);

/// Every input digest a request names (the run's reference, each shot's inputs).
std::vector<std::string> input_digests(const std::vector<msg::shot>& shots,
                                       const std::string& run_reference_sha256);

/// Sets each input's `bytes` (and reference_bytes) from `sizes` (digest -> bytes).
void set_input_sizes(msg::job_spec& j, const std::map<std::string, uint64_t>& sizes);

/// The videos of a client's collection folder offered with a submit
/// (msg::submit_run::collected), by job key into `out` (run::collected): "" or why the
/// submit is refused ("collected[I]: FIELD: why"; at most coordinator::max_collected_outputs).
std::string collected_outputs(const std::vector<msg::collected_output>& offered,
                              std::map<std::string, held_output>& out);

// -- shot lists (`run --jobs`, `plan --jobs`; docs/shots.md) ----------------------------------

/// The most takes one shot may have.
inline constexpr uint32_t max_takes = 1000;
/// The longest shot name (an output file stem before "-take-N").
inline constexpr std::size_t max_shot_name = 64;

/// "shot 3" or "shot 3 (hero)": shot `i` (0-based) of a list, 1-based, with its name.
std::string shot_label(std::size_t i, const msg::shot& s);

/// The output stem of take `take` (0-based) of `s`: "" without a name; the name for a shot
/// of one take; name-take-N (N from 1) with takes.
std::string shot_stem(const msg::shot& s, uint32_t take);

/// "" when a shot is acceptable on its own, else "FIELD: what is wrong": size (as `run`),
/// takes 1..max_takes, seed + takes - 1 within 2^64-1, prompt not empty, within
/// max_prompt_bytes, valid UTF-8, name empty or a safe name (files::is_safe_name) of at most
/// max_shot_name characters not starting with "job-" (the unnamed outputs' stem), reference
/// empty or acceptable (inbound::check_reference) with its SHA-256 empty or 64 hex digits.
std::string shot_problem(const msg::shot& s, const config::knobs& k);

/// "" when a whole list is acceptable: not empty, every shot (shot_problem, reported as
/// "shot N (name): FIELD: what"), names unique, output stems unique, takes summed at most
/// `max_jobs`.
std::string shots_problem(const std::vector<msg::shot>& shots, const config::knobs& k,
                          uint64_t max_jobs);

/// The jobs of a shot list: one per take, with the shot's own size, prompt and seed + take;
/// ordered by priority (higher first), then critical path (the shot that starts the longer
/// chain of shots taking from it first: config::graph::shot_ranks), then list order, indexed
/// 0.. in that order, so the scheduler, which takes a run's lowest queued index first,
/// honours both within the run. Inputs taken from other shots point at their source's job
/// (config::graph::link_jobs). A shot without a reference gets `reference` (the run's, "" none) and its
/// digest. prompt_sha256 is left empty for the caller.
/// With `cat`, each job also gets its shot's workflow, model, params (defaults applied) and
/// inputs (coordinator::resolve_run_shot; the shots were checked before), and every job its
/// shot's negative prompt, name, take and sequence.
/// `critical_path_first` false leaves the ranks out (priority, then list order): what a
/// list would get without them, for the planner to compare (planner::request).
std::vector<msg::job_spec> shot_jobs(const std::vector<msg::shot>& shots,
                                     const std::string& run_id, const std::string& reference,
                                     const std::string& reference_sha256,
                                     const config::catalog* cat = nullptr,
                                     bool critical_path_first = true);

/// capacity_refusal for each shot of a list: the first shot no pool of `mode` can hold, as
/// "shot N (name): <capacity_refusal>"; "" when every shot fits some pool of the mode.
std::string shots_capacity_refusal(const state& s, const std::string& mode,
                                   const std::vector<msg::shot>& shots);

/// Why no pool of `mode` can hold jobs of this size ("" when some pool can). Names each
/// pool with its limit.
std::string capacity_refusal(const state& s, const std::string& mode, uint32_t width,
                             uint32_t height, uint32_t seconds);

} // namespace vidline::actors::coordinator
