#pragma once
/// The critical path of a shot list, a lower bound of its makespan no schedule beats: a shot
/// that takes a frame from another cannot start before that shot's video exists, so a
/// chain's links run one after the other, each at least conditioning + warm sampling +
/// handoff + decode on the fastest (pool, decoder) pair of the mode that holds its size.
/// bench_chains and bench_rerender compare their makespans with it.

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "actors/coordinator/dispatch_setup.hpp"

namespace vidline::bench {

/// A job's least time from its inputs existing to its video, on the pools and decoders of
/// `mode`; infinity when no pool of the mode holds its size.
inline double least_link_s(const actors::coordinator::state& s, const actors::coordinator::profile_estimates& est,
                           const std::string& mode, const msg::job_spec& j) {
  double best = std::numeric_limits<double>::infinity();
  for (auto& p : s.modes.at(mode)) {
    const auto& pv = s.pools.at(p);
    auto warm = est.sampling(pv.kind, j, false);
    if (!warm)
      continue;
    for (auto& d : s.mode_decoders.at(mode))
      best = std::min(best, est.conditioning(pv.host) + *warm
                              + est.profile().handoff(pv.host == s.decoders.at(d).host).s
                              + est.decode(s.decoders.at(d), j));
  }
  return best;
}

struct critical_path {
  double seconds = 0;
  std::string last;  ///< the shot that ends it
};

/// The longest path through the list's graph, each shot at least_link_s (its jobs of model
/// `model`); with `renders`, a shot i whose renders[i] is false counts 0 (its video exists:
/// reused). The graph must have no cycle (graph_problem found none).
inline critical_path critical_path_of(const actors::coordinator::state& s,
                                      const actors::coordinator::profile_estimates& est,
                                      const std::string& mode, const std::vector<msg::shot>& shots,
                                      const std::string& model,
                                      const std::vector<bool>& renders = {}) {
  std::map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < shots.size(); ++i)
    by_name[shots[i].name] = i;
  std::vector<double> path(shots.size(), -1);  // from the start of the run to its video
  std::function<double(std::size_t)> end_of = [&](std::size_t i) {
    if (path[i] >= 0)
      return path[i];
    double from = 0;
    for (auto& in : shots[i].inputs)
      if (!in.from.empty())
        from = std::max(from, end_of(by_name.at(in.from)));
    msg::job_spec j;
    j.width = shots[i].width, j.height = shots[i].height, j.seconds = shots[i].seconds;
    j.model = model;
    const bool counts = renders.empty() || renders[i];
    return path[i] = from + (counts ? least_link_s(s, est, mode, j) : 0);
  };
  critical_path out;
  for (std::size_t i = 0; i < shots.size(); ++i)
    if (end_of(i) > out.seconds)
      out = {path[i], shots[i].name};
  return out;
}

} // namespace vidline::bench
