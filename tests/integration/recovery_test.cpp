// Crash-safe resume with real node processes: the coordinator's host killed mid-batch,
// a pool host killed while sampling (failover), and `vidline resume` of failed jobs.
#include <catch2/catch.hpp>

#include <filesystem>

#include "tests/support/cluster.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

vidline::msg::submit_run batch(const std::string& mode, uint32_t count, const std::string& id) {
  vidline::msg::submit_run r;
  r.mode = mode;
  r.prompt = "recovery test prompt";
  r.width = 416;
  r.height = 736;
  r.seconds = 5;
  r.count = count;
  r.seed = 987654321123ull;
  r.request_id = id;
  return r;
}

int count_state(const json& st, const std::string& state) {
  int n = 0;
  if (st.contains("jobs"))
    for (auto& j : st["jobs"])
      n += j["state"] == state ? 1 : 0;
  return n;
}

} // namespace

TEST_CASE("kill -9 of the coordinator's host mid-batch: the batch finishes, no stage paid twice") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.01);
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  auto req = batch("four_four_xtx_plus_one", 6, "recovery-kill-coordinator");
  auto run_id = cl.submit(req);

  // Mid-batch: some videos done, some not.
  auto mid = wait_status(cl, run_id, 60, [](const json& s) { return count_state(s, "succeeded") >= 2; });
  REQUIRE(count_state(mid, "succeeded") >= 2);
  REQUIRE(count_state(mid, "succeeded") < 6);
  a->signal(SIGKILL);
  REQUIRE(a->wait(10) == 128 + SIGKILL);
  a = start_node(dir.path(), config, "host_a");
  REQUIRE(coordinator_answers(cl, 30));

  auto st = wait_status(cl, run_id, 90, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  std::vector<std::string> data{dir.path() + "/host_a", dir.path() + "/host_b"};
  auto sampled = ledger_counts(data, run_id, "sampled");
  auto decoded = ledger_counts(data, run_id, "decoded");
  for (int i = 0; i < 6; ++i) {
    INFO("job " << i);
    CHECK(sampled[i] == 1);  // a finished latent was never made again
    CHECK(decoded[i] == 1);  // a finished video was never made again
  }
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

TEST_CASE("a pool host killed while sampling: its job is taken back within 10 s, done elsewhere") {
  temp_dir dir;
  // A slow clock (1 simulated s = 100 ms) so the XTX's job is still sampling at the kill
  // even when the status seen before it is seconds late (its sampling lasts 16 s of real
  // time; at 50 ms a loaded CI machine once killed the host after it had finished, so the
  // latent lay on the killed host); default liveness knobs (1 s heartbeat, 3 misses).
  auto config = write_reference_config(dir.path(), 0.1);
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch("four_four_xtx_plus_one", 3, "recovery-failover"));
  // Job 2 goes to the XTX on host_b; wait until it samples there.
  auto on_xtx = wait_status(cl, run_id, 30, [](const json& s) {
    return s["jobs"][2]["state"] == "sampling" && s["jobs"][2]["pool"] == "xtx";
  });
  REQUIRE(on_xtx["jobs"][2]["pool"] == "xtx");
  auto killed_at = std::chrono::steady_clock::now();
  b->signal(SIGKILL);
  REQUIRE(b->wait(10) == 128 + SIGKILL);
  // Taken back: queued for (or already on) another pool of the mode.
  auto moved = wait_status(cl, run_id, 15, [](const json& s) {
    return s["jobs"][2]["pool"] != "xtx" || s["jobs"][2]["state"] == "queued";
  });
  double moved_after =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  INFO("job 2 after the kill: " << moved["jobs"][2].dump());
  INFO("seen sampling on the XTX before the kill: " << on_xtx["jobs"][2].dump());
  CHECK((moved["jobs"][2]["pool"] != "xtx" || moved["jobs"][2]["state"] == "queued"));
  CHECK(moved_after <= 10.0);
  std::printf("failover: the killed host's job was taken back after %.2f s\n", moved_after);
  // With host_b still down, a pool of the mode that stayed up samples it.
  auto elsewhere = wait_status(cl, run_id, 30, [](const json& s) {
    return s["jobs"][2]["pool"] != "xtx" && s["jobs"][2]["state"] != "queued";
  });
  INFO(elsewhere.dump(2));
  REQUIRE(elsewhere["jobs"][2]["pool"] != "xtx");
  // The decoder lives on host_b too: bring it back and the batch completes.
  b = start_node(dir.path(), config, "host_b");
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  CHECK(st["jobs"][2]["pool"] != "xtx");  // finished on a pool of the mode that stayed up
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

TEST_CASE("vidline resume finishes failed jobs without sampling them again") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.005, json{{"max_attempts", 1}});
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch("four_four_plus_one", 3, "recovery-resume"));
  // Block the run's output directory with a plain file: every decode fails.
  auto outputs = dir.path() + "/host_b/outputs";
  std::filesystem::create_directories(outputs);
  std::ofstream(outputs + "/" + run_id) << "in the way";
  auto failed = wait_status(cl, run_id, 60, [](const json& s) { return s["state"] != "running"; });
  INFO(failed.dump(2));
  REQUIRE(failed["state"] == "failed");
  REQUIRE(count_state(failed, "failed") == 3);

  std::filesystem::remove(outputs + "/" + run_id);
  process resume({VIDLINE_BINARY, "resume", run_id, "--config", config, "--json", "--timeout",
                  "60"},
                 dir.path() + "/resume.out");
  REQUIRE(resume.wait(90) == 0);
  auto st = json::parse(resume.out());
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  auto sampled = ledger_counts({dir.path() + "/host_a", dir.path() + "/host_b"}, run_id, "sampled");
  for (int i = 0; i < 3; ++i)
    CHECK(sampled[i] == 1);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
