// Preemption on the sim line (two real node processes on loopback, knob
// preempt_priority_gap set): while the reference's 10 s 736x1280 job samples on the one
// pool of its mode, a shot of a higher priority is submitted. The sampling job saves a
// checkpoint at its next step and makes way; the priority shot starts within one
// checkpoint interval plus dispatch, and the preempted job resumes later from its
// checkpoint (not from step 0) with the uninterrupted latent. Prints RESULT lines (run-clock
// seconds) for docs/reliability.md.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "config/config.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;
using testing_support::temp_dir;

namespace {

constexpr double time_scale = 0.05;
constexpr double interval_s = 60;       ///< checkpoint_interval_s (the default)
constexpr double step_s = 442.11 / 30;  ///< one of the sim's 30 steps of the reference stage

/// `vidline run --jobs LIST --priority P --background` in the one-pool mode; its run id.
std::string submit(const std::string& dir, const std::string& config, const std::string& name,
                   const json& shot, int priority) {
  const std::string list = dir + "/" + name + ".jsonl";
  std::ofstream(list) << shot.dump() << "\n";
  testing_support::process p({VIDLINE_BINARY, "run", "--config", config, "--mode",
                              "single_eight_plus_one", "--jobs", list, "--priority",
                              std::to_string(priority), "--background"},
                             dir + "/submit-" + name + ".out");
  REQUIRE(p.wait(60) == 0);
  std::string id = p.out();
  id.erase(id.find_last_not_of(" \n") + 1);
  REQUIRE_FALSE(id.empty());
  return id;
}

} // namespace

TEST_CASE("preemption: a priority shot starts within a checkpoint interval, the long job "
          "resumes from its checkpoint",
          "[checkpoint]") {
  temp_dir dir("vl-preempt");
  const auto config = testing_support::write_reference_config(
    dir.path(), time_scale,
    {{"heartbeat_interval_ms", 500}, {"heartbeat_misses", 3}, {"status_interval_ms", 100},
     {"order_resend_ms", 1000}, {"lease_ms", 3000}, {"checkpoint_interval_s", interval_s},
     {"preempt_priority_gap", 10}});
  auto cluster = config::load(config);
  std::map<std::string, std::unique_ptr<testing_support::process>> nodes;
  for (const char* h : {"host_a", "host_b"})
    nodes[h] = testing_support::start_node(dir.path(), config, h);
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  REQUIRE(testing_support::line_reported(cl, 30));

  const auto long_run = submit(dir.path(), config, "long",
                               {{"prompt", "the reference's long shot"}, {"width", 736},
                                {"height", 1280}, {"seconds", 10}, {"seed", 5}, {"name", "long"}},
                               0);
  // Two steps past its first checkpoint: the typical moment, mid-interval.
  auto mid = testing_support::wait_status(cl, long_run, 120, [](const json& s) {
    auto& j = s["jobs"][0];
    return s["state"] != "running"
           || (j["state"] == "sampling" && j["checkpoint"].is_object() && j["progress"].is_object()
               && j["progress"]["step"].get<int>() >= j["checkpoint"]["step"].get<int>() + 2);
  });
  INFO(mid.dump().substr(0, 3000));
  REQUIRE(mid["state"] == "running");
  const int progress_at_submit = mid["jobs"][0]["progress"]["step"].get<int>();

  const auto rush = submit(dir.path(), config, "rush",
                           {{"prompt", "a rush shot"}, {"width", 416}, {"height", 736},
                            {"seconds", 5}, {"seed", 6}, {"name", "rush"}},
                           20);
  // Its order: as soon as the long job made way (the coordinator's view, run clock).
  auto ordered = testing_support::wait_status(cl, rush, 120, [](const json& s) {
    return s["state"] != "running" || s["jobs"][0]["state"] != "queued";
  });
  const double ordered_s = ordered["jobs"][0]["running"].is_object()
                             ? ordered["jobs"][0]["running"]["start_s"].get<double>()
                             : -1;
  auto rush_done = testing_support::wait_status(
    cl, rush, 180, [](const json& s) { return s["state"] != "running"; });
  INFO(rush_done.dump().substr(0, 3000));
  REQUIRE(rush_done["state"] == "succeeded");
  // When its pool began the stage (conditioning), from the pool's own stamps.
  const double wait_s = rush_done["jobs"][0]["times"]["sample_start_s"].get<double>();
  auto long_done = testing_support::wait_status(
    cl, long_run, 240, [](const json& s) { return s["state"] != "running"; });
  INFO(long_done.dump().substr(0, 3000));
  REQUIRE(long_done["state"] == "succeeded");
  const auto& l = long_done["jobs"][0];
  CHECK(testing_support::contract_problem(rush_done["jobs"][0]) == "");
  CHECK(testing_support::contract_problem(l) == "");
  CHECK(l["preemptions"] == 1);
  // It went on from the checkpoint it saved when it made way, not from step 0.
  CHECK(l["resumed_from_step"].get<int>() >= progress_at_submit);
  const double paid = l["gpu_s_paid_twice"].get<double>();
  CHECK(l["done_twice"] == 0);

  std::printf("RESULT preempt_priority_start_s %.1f s target <= %.0f + dispatch "
              "(submitted at step %d of the 442 s stage; run clock)\n",
              wait_s, interval_s, progress_at_submit);
  std::printf("RESULT preempt_priority_ordered_s %.1f s target - (the coordinator's order)\n",
              ordered_s);
  std::printf("RESULT preempt_resumed_from_step %d step target >= %d\n",
              l["resumed_from_step"].get<int>(), progress_at_submit);
  std::printf("RESULT preempt_gpu_s_paid_twice %.1f gpu_s target <= %.1f (one step on 8 GPUs)\n",
              paid, 8 * step_s);
  // Made way at its next step boundary: at most one step and the dispatch of the shot
  // (a status report's way, the order, its conditioning's start), well inside the interval.
  CHECK(wait_s <= interval_s);
  CHECK(paid <= 8 * step_s);

  for (auto& [h, n] : nodes)
    n->signal(SIGTERM);
  for (auto& [h, n] : nodes)
    n->wait(30);
}
