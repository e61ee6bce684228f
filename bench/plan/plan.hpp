#pragma once
/// What bench_plan's parts share: a cluster set up for the planner, planning on it, the
/// bounds (bounds.cpp) and the exhaustive search (search.cpp).

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/planner/plan.hpp"

namespace vidline::bench::plan_bench {

struct setup {
  std::string name;
  config::cluster cluster;
  std::shared_ptr<actors::coordinator::profile_estimates> est;
  actors::coordinator::state state;
};

setup make_setup(const std::string& name, const char* json,
                 const std::map<std::string, std::string>& policies = {});

/// The same cluster without one decoder.
setup without_decoder(const setup& from, const std::string& decoder);

actors::planner::plan_result plan(const setup& s, const std::string& mode, uint32_t w, uint32_t h,
                          uint32_t secs, uint32_t count);

bool complete(const actors::planner::plan_result& p, uint32_t count);

// -- the bounds (bounds.cpp) -------------------------------------------------------------------

/// The steady-state upper bound in clips per second: the best layout's sum of warm sampling
/// rates (pools sharing GPUs: the best set of them that runs together), capped by the sum of
/// the decoders' rates.
double upper_bound(const setup& s, uint32_t w, uint32_t h, uint32_t secs);

/// The makespan of a line that runs at the steady-state rates after an unavoidable ramp:
/// each pool of a layout finishes its first clip at conditioning + cold sampling + handoff +
/// decode (on its best decoder, no queue) and then one more every warm sampling time; the
/// count-th earliest of those clips; no sooner than the decoders' summed rate allows from
/// the first latent on. The best layout. No schedule that keeps one layout does better.
double makespan_bound(const setup& s, uint32_t w, uint32_t h, uint32_t secs, uint32_t count);

/// The steady-state upper bound (clips per second) of a cluster for a mix of sizes (`share`
/// of each, summing to 1), as a linear program: the line time-shares its layouts (sets of
/// pools that run together: lambda_L of the time each, summed at most 1); pool p spends
/// x_pc of the time sampling size c warm (summed at most the time its layouts run), giving
/// x_pc / warm_pc clips of c a second; every decoder likewise, y_dc of its time on c at
/// decode_dc each (all decoders at once, a GPU shared with a pool or not: an over-estimate,
/// so still a bound). The throughput X needs share_c X clips of each size a second from
/// both. Conditioning, cold starts, handoffs and every ramp are left out: no schedule does
/// better.
double mix_upper_bound(const setup& s, const std::vector<std::array<uint32_t, 3>>& sizes,
                       const std::vector<double>& share);

// -- the best schedule in the model, by exhaustive search (search.cpp) ----------------------

struct search_result {
  double best = 1e300;             ///< the best makespan of any schedule (1e300: none)
  std::map<std::string, int> jobs_per_pool;  ///< of the best schedule
  uint64_t schedules = 0;          ///< line_sim runs (one per leaf of the search tree)
  uint64_t pruned = 0;
  bool complete = true;            ///< the whole tree was searched (no node limit hit)
};

/// Every schedule of `count` jobs of one size on every pool and decoder of the cluster
/// (mode auto's resources), searched depth first with line_sim.
search_result best_schedule(const setup& c, uint32_t w, uint32_t h, uint32_t secs,
                            uint32_t count, uint64_t max_schedules);

} // namespace vidline::bench::plan_bench
