// Plan equals run: the same batch planned on the virtual clock and run by two real node
// processes (sim backend, scaled clock) lands on the same pools job by job, and the
// makespans agree within 2%. Also the `vidline plan` command line itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <utility>

#include "nodes/verbs/plan_cmd.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

struct batch_case {
  const char* mode;
  uint32_t width, height;
};

/// One batch of `c` planned and run on a fresh line of two node processes: checks that
/// every job ran on the pool the plan gave it; returns the live and the planned makespan.
std::pair<double, double> plan_and_run(const batch_case& c) {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.04);
  auto cluster = vidline::config::load(config);
  auto setup = vidline::nodes::verbs::load_plan_setup(config, "");
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  // The plan's pools have all reported when the batch comes in: so have the live ones.
  REQUIRE(line_reported(cl, 30));
  vidline::msg::submit_run req;
  req.mode = c.mode;
  req.prompt = "plan vs run";
  req.width = c.width;
  req.height = c.height;
  req.seconds = 5;
  req.count = 6;
  req.seed = 987654321123ull;
  req.request_id = std::string("plan-vs-run-") + c.mode;
  auto run_id = cl.submit(req);
  auto st = wait_status(cl, run_id, 180, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");

  vidline::actors::planner::request pr;
  pr.mode = c.mode;
  pr.width = c.width;
  pr.height = c.height;
  pr.seconds = 5;
  pr.count = 6;
  pr.seed = req.seed;
  auto plan = vidline::actors::planner::plan(setup.state, *setup.est, pr);
  REQUIRE(plan.refused.empty());
  for (auto& j : st["jobs"]) {
    auto i = j["index"].get<std::size_t>();
    CHECK(j["pool"] == plan.jobs[i].pool);
  }
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
  return {st["summary"]["makespan_s"].get<double>(), plan.summary.makespan_s};
}

} // namespace

TEST_CASE("a plan and a live run of the same batch: same pools, makespan within 2%") {
  // The XTX takes 2 of 6 jobs in the first mode and 3 of 6 in the second (in turn). Each
  // batch on a fresh line: a plan starts from cold models, as a line does after starting.
  // The clock runs at 1/25 of real time so that real delays (messages, the latent's
  // transfer, a loaded machine) stay small in run-clock seconds. Still, one stall of the
  // shared machine for 2 real seconds is 50 run-clock seconds (a 19% longer batch, seen
  // once in CI-like runs): a batch off by more than 2% is run once more on a fresh line,
  // and the second must agree. The pools must agree every time.
  for (auto c : {batch_case{"four_four_xtx_plus_one", 416, 736},
                 batch_case{"eight_xtx_plus_one", 736, 1280}}) {
    INFO("mode " << c.mode);
    auto [live, planned] = plan_and_run(c);
    if (std::abs(live / planned - 1) > 0.02) {
      WARN("mode " << c.mode << ": live " << live << " s, planned " << planned
                   << " s; running the batch again on a fresh line");
      std::tie(live, planned) = plan_and_run(c);
    }
    INFO("live " << live << " s, planned " << planned << " s");
    CHECK(std::abs(live / planned - 1) <= 0.02);
  }
}

TEST_CASE("vidline plan: every mode side by side as JSON, an impossible size is refused") {
  temp_dir dir;
  process all({VIDLINE_BINARY, "plan", "--mode", "all", "--width", "736", "--height", "1280",
               "--seconds", "5", "--count", "6", "--seed", "987654321123", "--json", "--gantt",
               dir.path() + "/plan.svg"},
              dir.path() + "/all.out");
  REQUIRE(all.wait(60) == 0);
  auto j = json::parse(all.out());
  REQUIRE(j["modes"].size() == 5);
  CHECK(j["modes"][4]["mode"] == "auto");
  for (auto& m : j["modes"]) {
    CHECK(m["summary"]["succeeded"] == 6);
    CHECK(m["summary"].contains("first_finish_s"));
    CHECK(m["summary"].contains("makespan_s"));
    CHECK(m["summary"].contains("clips_per_hour"));
    // The reference line measured its four modes; auto is ours.
    CHECK(m.contains("measured") == (m["mode"] != "auto"));
  }
  CHECK(j["best"].is_string());
  auto svg = read_file(dir.path() + "/plan.svg");
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("four_four_xtx_plus_one") != std::string::npos);

  process refused({VIDLINE_BINARY, "plan", "--mode", "four_four_plus_one", "--width", "736",
                   "--height", "1280", "--seconds", "10", "--count", "2"},
                  dir.path() + "/refused.out");
  CHECK(refused.wait(60) == 2);
  CHECK(refused.err().find("no pool of mode four_four_plus_one can hold") != std::string::npos);
}
