#pragma once
/// Dispatch setup: how the coordinator's scheduler state is made from a cluster's config
/// and a timing profile, the same for the live coordinator and for the planner (a plan and
/// a run of the same batch dispatch alike): the initial state, pool capacity limits from
/// the profile, the `auto` mode and each mode's policy, the stage estimates, and the checks
/// of what a submit asks (modes, shot lists, capacity).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "actors/coordinator/policy.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "config/workflows.hpp"
#include "config/profile/profile.hpp"

namespace vidline::dispatching {

/// The scheduler's initial state for a cluster: pools with their GPU conflicts, modes,
/// decoders, and params converted from the knobs to run-clock seconds.
sched::state initial_state(const config::cluster& c, double time_scale);

/// Sets `s` (from initial_state) up to dispatch as `vidline plan` plans: pool capacity
/// limits and auto's estimates from the profile the config's sim backends name (else the
/// embedded reference), the mode "auto", each mode's configured policy (configure).
void configure_dispatch(sched::state& s, const config::cluster& c);

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

/// Expected stage times from a profile, for a cluster (encoders per host, decoder hosts).
/// Lookups are cached: not for use from several threads at once.
class profile_estimates : public sched::stage_estimates {
public:
  profile_estimates(const config::cluster& c, profiles::profile p);

  std::optional<double> sampling(const std::string& kind, const msg::job_spec& j,
                                 bool cold) const override;
  double conditioning(const std::string& host) const override;
  double handoff(const std::string& from_host, const sched::decoder_view& d,
                 const msg::job_spec& j) const override;
  double decode(const sched::decoder_view& d, const msg::job_spec& j) const override;

  const profiles::profile& profile() const { return p_; }

private:
  profiles::profile p_;
  std::map<std::string, std::string> encoder_of_host_;  ///< host -> encoder profile key
  mutable std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t, bool, std::string>,
                   std::optional<double>> sampling_;
  mutable std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t>, double> decode_;
};

/// Estimates for a cluster from a profile file, or (empty) the one the config's sim
/// backends name, else the embedded reference. `source` (if given) says which. Throws
/// profiles::profile_error.
std::shared_ptr<const profile_estimates> estimates_for(const config::cluster& c,
                                                       const std::string& profile_file = "",
                                                       std::string* source = nullptr);

/// Makes the coordinator's state plan like the line will run: pools get the profile's
/// capacity limits (max_load) for kinds it knows; a decoder on a GPU that pools also use is
/// marked as sharing it with them (they never work at once); the mode "auto" (every pool and decoder,
/// unless the config defines a mode of that name) gets the auto policy; a mode named in
/// `policies` gets that policy ("in_turn", "first_free", "auto"), every other mode in_turn.
/// Throws std::invalid_argument for an unknown policy name.
void configure(sched::state& s, const config::cluster& c,
               std::shared_ptr<const profile_estimates> est,
               const std::map<std::string, std::string>& policies = {});

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
/// inputs (dispatching::resolve_run_shot; the shots were checked before), and every job its
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
std::string shots_capacity_refusal(const sched::state& s, const std::string& mode,
                                   const std::vector<msg::shot>& shots);

/// Why no pool of `mode` can hold jobs of this size ("" when some pool can). Names each
/// pool with its limit.
std::string capacity_refusal(const sched::state& s, const std::string& mode, uint32_t width,
                             uint32_t height, uint32_t seconds);

} // namespace vidline::dispatching
