// The seeded whole-system simulation: the coordinator's scheduler, the pools and decoders
// of actors::planner::simulate on the virtual clock, under a lossy, duplicating, reordering network
// and crashes. After every event the line checks its invariants (planner/line_sim.hpp).
#include <catch2/catch.hpp>

#include "actors/planner/line_sim.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using namespace sched_fixtures;

TEST_CASE("deterministic simulation: lossy, duplicating, reordering network and crashes") {
  // Each seed runs a 6-job batch through the whole line with faults; after every event the
  // line checks: decoder pending <= 1, a job final at most once, the journal never backwards.
  const int seeds = 2000;
  int finished = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    actors::planner::faults f;
    f.seed = static_cast<uint64_t>(seed);
    f.drop = 0.05;
    f.duplicate = 0.05;
    f.max_delay_s = 3;
    f.crash = 0.01;
    f.status_interval_s = 5;
    auto s = two_pools_one_decoder();
    s.p.max_attempts = 50;  // crashes are frequent here: let jobs outlive them
    auto res = actors::planner::simulate(s, run_of("r1", 6), simple_timing(), f, 1e6);
    INFO("seed " << seed);
    REQUIRE(res.violations.empty());
    REQUIRE(res.finished);
    for (auto& j : res.run.jobs)
      REQUIRE((j.state == actors::coordinator::job_state::succeeded || j.state == actors::coordinator::job_state::failed));
    ++finished;
  }
  CHECK(finished == seeds);
}
