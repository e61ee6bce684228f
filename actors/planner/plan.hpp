#pragma once
/// The planner: a batch run ahead of time on a virtual clock, by the coordinator's own
/// scheduler and the pools' and decoders' own machines (line_sim), with every stage taking
/// the time a timing profile says. `vidline plan` prints what it returns.
///
/// The same functions set up the live coordinator's state (`configure`), so a plan and a
/// run of the same batch dispatch alike: pool capacity limits from the profile, the `auto`
/// mode, and each mode's dispatch policy.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/coordinator/policy.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/planner/line_sim.hpp"
#include "config/profile/profile.hpp"
#include "config/config.hpp"
#include "config/workflows.hpp"

namespace vidline::actors::planner {

/// One batch to plan: uniform (width, height, seconds, count seeds from seed), or a shot
/// list when `shots` is not empty (the uniform fields are then ignored).
struct request {
  std::string mode;
  uint32_t width = 0, height = 0, seconds = 0, count = 1;
  uint64_t seed = 0;
  std::string prompt = "vidline plan";
  std::vector<msg::shot> shots;
  /// The workflows the shots may name: each job gets its workflow's model (a pool holds one
  /// model; a job of another model is a cold stage). nullptr = every job of one model.
  const config::catalog* catalog = nullptr;
  /// Shots that start longer chains go first (what a run does); false plans the jobs in
  /// the list's order (priority first still), to see what the ranking gains.
  bool critical_path_first = true;
};

/// One job as planned: where it ran and when each stage began and ended (run-clock seconds
/// from submission; nullopt = the stage did not happen, e.g. conditioning already done).
struct planned_job {
  uint32_t index = 0;
  uint64_t seed = 0;
  uint32_t width = 0, height = 0, seconds = 0;
  std::string name;  ///< output stem of a shot's take ("" = unnamed)
  std::string pool;
  std::string decoder;
  bool cold = false;
  std::string model;  ///< its workflow's model key ("" = the request named no workflows)
  std::string state;
  std::vector<uint32_t> takes_from;  ///< the jobs whose videos it takes a frame from
  struct span { double start = 0, end = 0; };
  std::optional<span> conditioning, sampling, handoff, decode;
};

/// A plan of one batch in one mode.
struct plan_result {
  std::string mode;
  std::string policy;                 ///< the mode's dispatch policy
  std::vector<std::string> pools;     ///< the mode's pools, in order
  std::vector<std::string> decoders;
  std::string refused;                ///< why it was not planned ("" = it was)
  coordinator::summary summary;
  /// `jobs` and `spans` were kept (sim_options::record_spans); otherwise only the summary.
  bool detailed = true;
  std::vector<planned_job> jobs;
  std::vector<stage_span> spans;      ///< for the Gantt chart
  std::vector<double> step_seconds;   ///< wall time per coordinator step (sim_options)
  /// The energy of the plan's stages from the profile's power figures: each job's
  /// conditioning and sampling span times its pool kind's watts, its decode times its
  /// decoder kind's watts. Joules; -1 = unknown, when a kind the plan used has no power
  /// figure (`unpowered` names them: `vidline profile build` learns them from runs with
  /// GPU telemetry). wh_per_clip: per succeeded job.
  double energy_j = -1;
  double wh_per_clip = -1;
  std::vector<std::string> unpowered;
  bool finished = false;
  std::vector<std::string> violations;
  uint64_t events = 0;
};

/// Plans `req` on a state from coordinator::initial_state + configure. Refuses up front (result
/// `refused`) an unknown mode, a mode without pools or decoders, or a size no pool of the
/// mode can hold.
plan_result plan(const coordinator::state& s, const coordinator::profile_estimates& est, const request& req,
                 const sim_options& o = {});

/// The modes of `s` in the order `vidline plan --mode all` shows them: the config's, then
/// auto.
std::vector<std::string> modes_to_compare(const coordinator::state& s, const config::cluster& c);

/// The stage times line_sim runs the line with (the sim backend's, from the profile of
/// `est`).
timing line_timing(const coordinator::profile_estimates& est);

} // namespace vidline::actors::planner
