// bench_plan's clusters set up for the planner, and planning a batch on one.

#include <algorithm>

#include "bench/plan/plan.hpp"

namespace vidline::bench::plan_bench {

setup make_setup(const std::string& name, const char* json,
                 const std::map<std::string, std::string>& policies) {
  setup s;
  s.name = name;
  s.cluster = config::parse(json, "");
  s.est = std::make_shared<actors::coordinator::profile_estimates>(s.cluster,
                                                       config::profile::profile::reference());
  s.state = actors::coordinator::initial_state(s.cluster, 1.0);
  actors::coordinator::configure(s.state, s.cluster, s.est, policies);
  return s;
}

/// The same cluster without one decoder.
setup without_decoder(const setup& from, const std::string& decoder) {
  setup s;
  s.name = from.name + " without " + decoder;
  s.cluster = from.cluster;
  auto& ds = s.cluster.decoders;
  ds.erase(std::remove_if(ds.begin(), ds.end(),
                          [&](const config::decoder& d) { return d.name == decoder; }),
           ds.end());
  s.est = std::make_shared<actors::coordinator::profile_estimates>(s.cluster,
                                                       config::profile::profile::reference());
  s.state = actors::coordinator::initial_state(s.cluster, 1.0);
  actors::coordinator::configure(s.state, s.cluster, s.est);
  return s;
}

actors::planner::plan_result plan(const setup& s, const std::string& mode, uint32_t w, uint32_t h,
                          uint32_t secs, uint32_t count) {
  actors::planner::request req;
  req.mode = mode;
  req.width = w;
  req.height = h;
  req.seconds = secs;
  req.count = count;
  req.seed = 987654321123ull;
  return actors::planner::plan(s.state, *s.est, req);
}

bool complete(const actors::planner::plan_result& p, uint32_t count) {
  return p.refused.empty() && p.finished && p.summary.succeeded == count
         && p.violations.empty();
}

} // namespace vidline::bench::plan_bench
