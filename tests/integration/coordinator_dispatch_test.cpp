// The live coordinator dispatches as `vidline plan` plans: mode auto, each mode's configured
// policy, and a size no pool of the mode can hold refused at submission. Two real node
// processes, sim backend, clock 1/25 of real time, each batch on a fresh line.
#include <catch2/catch.hpp>

#include <cmath>

#include "nodes/verbs/plan_cmd.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

vidline::msg::submit_run batch(const std::string& mode, uint32_t w, uint32_t h, uint32_t s,
                               uint32_t count) {
  vidline::msg::submit_run r;
  r.mode = mode;
  r.prompt = "coordinator dispatch";
  r.width = w;
  r.height = h;
  r.seconds = s;
  r.count = count;
  r.seed = 4242;
  r.request_id = "dispatch-" + mode + "-" + std::to_string(w);
  return r;
}

/// Plans `r` on the config's cluster as the coordinator will run it.
vidline::actors::planner::plan_result plan_of(const std::string& config,
                                      const vidline::msg::submit_run& r) {
  auto setup = vidline::nodes::verbs::load_plan_setup(config, "");
  vidline::actors::planner::request pr;
  pr.mode = r.mode;
  pr.width = r.width;
  pr.height = r.height;
  pr.seconds = r.seconds;
  pr.count = r.count;
  pr.seed = r.seed;
  auto p = vidline::actors::planner::plan(setup.state, *setup.est, pr);
  REQUIRE(p.refused.empty());
  return p;
}

/// Runs `r` on a fresh two-node line and checks it against its plan: as many jobs on each
/// pool as planned, makespan within 3%. Which job goes where is left to plan_vs_run_test:
/// here pools free within seconds of each other (two 4 x T10 pools finishing together; the
/// 8 x T10 and the XTX 5.8 s apart under first_free, 0.23 s of real time) make the order of
/// jobs a matter of the order results arrive in, not of the policy.
void run_as_planned(const std::string& dir, const std::string& config,
                    const vidline::msg::submit_run& r) {
  auto plan = plan_of(config, r);
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir, config, "host_a");
  auto b = start_node(dir, config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  // A plan's pools have all reported when the batch comes in (see plan_vs_run_test).
  std::this_thread::sleep_for(std::chrono::seconds(2));  // no client call shows pool status
  auto run_id = cl.submit(r);
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");
  std::map<std::string, int> live_jobs, planned_jobs;
  for (auto& j : st["jobs"])
    ++live_jobs[j["pool"].get<std::string>()];
  for (auto& j : plan.jobs)
    ++planned_jobs[j.pool];
  CHECK(live_jobs == planned_jobs);
  double live = st["summary"]["makespan_s"].get<double>();
  INFO("live " << live << " s, planned " << plan.summary.makespan_s << " s");
  // plan_vs_run_test holds fixed modes to 2%; here the point is the dispatch, and a loaded
  // machine adds real delays the scaled clock multiplies (measured +0.1% to +2.3%).
  CHECK(std::abs(live / plan.summary.makespan_s - 1) <= 0.03);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

} // namespace

TEST_CASE("the coordinator runs mode auto as planned and refuses what no pool can hold") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.04);
  auto cluster = vidline::config::load(config);
  {
    auto a = start_node(dir.path(), config, "host_a");
    coordinator_client cl(cluster);
    REQUIRE(coordinator_answers(cl, 30));
    // 736x1280x10 fits the 8 x T10 and the XTX, not a 4 x T10 pool (the profile's limits).
    try {
      cl.submit(batch("four_four_plus_one", 736, 1280, 10, 2));
      FAIL("an oversize batch was accepted");
    } catch (const std::exception& e) {
      CHECK_THAT(e.what(), Catch::Contains("no pool of mode four_four_plus_one can hold "
                                           "736x1280, 10 s"));
      CHECK_THAT(e.what(), Catch::Contains("four_a (t10x4) holds up to 4,710,400"));
    }
    try {
      cl.submit(batch("auto", 1280, 1280, 10, 1));
      FAIL("a batch no pool can hold was accepted");
    } catch (const std::exception& e) {
      CHECK_THAT(e.what(), Catch::Contains("no pool of mode auto can hold 1280x1280, 10 s"));
    }
    try {
      cl.submit(batch("fastest", 416, 736, 5, 1));
      FAIL("an unknown mode was accepted");
    } catch (const std::exception& e) {
      CHECK_THAT(e.what(), Catch::Contains("unknown mode 'fastest'"));
      CHECK_THAT(e.what(), Catch::Contains("auto"));
    }
    a->signal(SIGTERM);
    CHECK(a->wait(20) == 0);
  }
  temp_dir fresh;
  auto config2 = write_reference_config(fresh.path(), 0.04);
  run_as_planned(fresh.path(), config2, batch("auto", 416, 736, 5, 6));
}

TEST_CASE("the coordinator dispatches by the mode's configured policy") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.04);
  auto cfg = json::parse(read_file(config));
  cfg["modes"]["eight_xtx_plus_one"]["policy"] = "first_free";
  std::ofstream(config) << cfg.dump(2);
  auto r = batch("eight_xtx_plus_one", 416, 736, 5, 6);
  // The test can fail: first free gives the XTX fewer jobs than in turn would.
  auto xtx_jobs = [](const vidline::actors::planner::plan_result& p) {
    return std::count_if(p.jobs.begin(), p.jobs.end(),
                         [](auto& j) { return j.pool == "xtx"; });
  };
  auto in_turn = vidline::nodes::verbs::load_plan_setup(config, "", "in_turn");
  vidline::actors::planner::request pr{r.mode, r.width, r.height, r.seconds, r.count, r.seed};
  REQUIRE(xtx_jobs(plan_of(config, r)) < xtx_jobs(vidline::actors::planner::plan(in_turn.state,
                                                                         *in_turn.est, pr)));
  run_as_planned(dir.path(), config, r);
}
