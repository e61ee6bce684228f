// Runs side by side on the reference cluster (sim profile, virtual clock): the scheduler
// shares the line among every open run (docs/design.md, "The queue").
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "actors/planner/line_sim.hpp"
#include "actors/planner/plan.hpp"
#include "nodes/verbs/plan_cmd.hpp"

using namespace vidline;

namespace {

constexpr uint64_t seed0 = 987654321123ull;

/// `n` runs of `per_run` jobs each, 416x736x5, one prompt (as the one run of six shares it).
std::vector<actors::coordinator::run> runs_of(const std::string& mode, uint32_t n, uint32_t per_run,
                                std::vector<int32_t> priorities = {}) {
  std::vector<actors::coordinator::run> out;
  for (uint32_t k = 0; k < n; ++k) {
    actors::coordinator::run r;
    r.id = "run" + std::to_string(k);
    r.mode = mode;
    r.priority = k < priorities.size() ? priorities[k] : 0;
    for (uint32_t i = 0; i < per_run; ++i) {
      actors::coordinator::job j;
      j.spec = msg::job_spec{r.id, i, seed0 + k * per_run + i, 416, 736, 5,
                             "vidline plan", "plan-prompt", ""};
      r.jobs.push_back(std::move(j));
    }
    out.push_back(std::move(r));
  }
  return out;
}

double last_finish(const actors::planner::result& res) {
  double t = actors::coordinator::summarize(res.run).makespan_s;
  for (auto& r : res.others)
    t = std::max(t, actors::coordinator::summarize(r).makespan_s);
  return t;
}

std::set<std::string> pools_used(const actors::planner::result& res) {
  std::set<std::string> out;
  for (auto* r : {&res.run}) {
    for (auto& j : r->jobs)
      out.insert(j.pool);
  }
  for (auto& r : res.others)
    for (auto& j : r.jobs)
      out.insert(j.pool);
  return out;
}

double one_run_makespan(const nodes::verbs::plan_setup& s, const std::string& mode, uint32_t count) {
  actors::planner::request req;
  req.mode = mode;
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = count;
  req.seed = seed0;
  auto p = actors::planner::plan(s.state, *s.est, req);
  REQUIRE(p.finished);
  return p.summary.makespan_s;
}

} // namespace

TEST_CASE("six 1-shot runs submitted together finish as the same six shots in one run do") {
  // The defect: in_turn's rotation was per run, so job 0 of every run had four_a as its
  // home: six runs sampled on four_a one after another (the last done at 524 s) while
  // four_b and xtx sat idle. The rotation is over the queue now.
  for (std::string policy : {"", "first_free", "auto"}) {
    auto s = nodes::verbs::load_plan_setup("", "", policy);
    const std::string mode = "four_four_xtx_plus_one";
    const double batch = one_run_makespan(s, mode, 6);
    auto res = actors::planner::simulate_runs(s.state, runs_of(mode, 6, 1), actors::planner::line_timing(*s.est),
                                      actors::planner::faults{}, 1e9, actors::planner::sim_options{true});
    INFO("policy " << (policy.empty() ? "in_turn (default)" : policy) << ": six runs end at "
                   << last_finish(res) << " s, one run of six at " << batch << " s");
    REQUIRE(res.finished);
    CHECK(res.violations.empty());
    REQUIRE(res.others.size() == 5);
    CHECK(last_finish(res) <= batch * 1.02 + 1e-6);
    CHECK(last_finish(res) < 300);  // the reference's 267 s; it was 524 s
    if (policy.empty())
      CHECK(pools_used(res) == std::set<std::string>{"four_a", "four_b", "xtx"});
  }
}

TEST_CASE("runs side by side: the higher priority goes first, then submission order") {
  auto s = nodes::verbs::load_plan_setup("", "", "first_free");
  const std::string mode = "four_four_xtx_plus_one";
  // Three runs of 6; the last one submitted has the highest priority: it takes the free
  // pools first and finishes before the two earlier ones.
  auto res = actors::planner::simulate_runs(s.state, runs_of(mode, 3, 6, {0, 0, 5}),
                                    actors::planner::line_timing(*s.est), actors::planner::faults{}, 1e9,
                                    actors::planner::sim_options{true});
  REQUIRE(res.finished);
  CHECK(res.violations.empty());
  REQUIRE(res.others.size() == 2);
  const double first = actors::coordinator::summarize(res.run).makespan_s;
  const double second = actors::coordinator::summarize(res.others[0]).makespan_s;
  const double urgent = actors::coordinator::summarize(res.others[1]).makespan_s;
  INFO("run0 " << first << " s, run1 " << second << " s, run2 (priority 5) " << urgent << " s");
  CHECK(urgent < first);
  CHECK(first <= second);
  // (run0 is submitted first and takes the three idle pools at once; from then on every
  // pool that frees up goes to the urgent run until its queue is empty.)
}
