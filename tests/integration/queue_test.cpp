// The queue with real node processes (two hosts on loopback, reference cluster, sim):
// runs side by side use every pool; jobs added to an open run; cancel frees a pool within
// one status interval; a coordinator kill -9 after a cancel keeps the run cancelled; the
// CLI verbs (runs, cancel, submit) and wait's exit code for a cancelled run.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>

#include "nodes/verbs/exit_codes.hpp"
#include "common/sha256.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

vidline::msg::submit_run batch(uint32_t count, const std::string& id, int32_t priority = 0) {
  vidline::msg::submit_run r;
  r.mode = "four_four_xtx_plus_one";
  r.prompt = "queue test prompt";
  r.width = 416;
  r.height = 736;
  r.seconds = 5;
  r.count = count;
  r.seed = 1000;
  r.request_id = id;
  r.priority = priority;
  return r;
}

/// Runs `vidline ARGS...` to its end; (exit code, stdout).
std::pair<int, std::string> vidline_cli(const std::string& dir, std::vector<std::string> args) {
  static int n = 0;
  args.insert(args.begin(), VIDLINE_BINARY);
  process p(args, dir + "/cli." + std::to_string(n++) + ".out");
  int rc = p.wait(60);
  return {rc, p.out()};
}

bool pool_busy(coordinator_client& cl, const std::string& pool) {
  auto c = cl.status("@cluster", 1000);
  return !c || (*c)["pools"][pool]["busy"].get<bool>();
}

} // namespace

TEST_CASE("two runs side by side use every pool of the mode, submit adds to an open run") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.02);
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  // Wait until the coordinator has heard from all three pools (they then start together).
  REQUIRE(wait_status(cl, "@cluster", 30, [](const json& c) {
            for (auto* p : {"four_a", "four_b", "xtx"})
              if (!c["pools"][p]["alive"].get<bool>())
                return false;
            return true;
          })["pools"]["xtx"]["alive"] == true);
  auto one = cl.submit(batch(1, "queue-one"));
  auto two = cl.submit(batch(2, "queue-two"));
  // Per-run rotation sent job 0 of both runs to four_a, and xtx idled; the queue's rotation
  // gives each job its own pool.
  vidline::msg::submit_jobs more;
  more.run_id = two;
  more.prompt = "queue test prompt, added";
  more.width = 416;
  more.height = 736;
  more.seconds = 5;
  more.count = 1;
  more.seed = 2000;
  more.request_id = "queue-two-more";
  auto added = cl.submit_jobs(more);
  CHECK(added.first_index == 2);
  CHECK(cl.submit_jobs(more).first_index == 2);  // a retry adds nothing twice
  // `vidline submit --reference-file`: the image is uploaded by digest first, then moved
  // away before the job samples; the job samples (and the sim verifies) the host's copy.
  std::filesystem::create_directories(dir.path() + "/cli-refs");
  const std::string ref = dir.path() + "/cli-refs/added.png";
  std::ofstream(ref) << "a reference for the added job";
  std::ofstream(dir.path() + "/added-prompt.txt") << "queue test prompt, added with a reference";
  auto [sub_rc, sub_out] = vidline_cli(
      dir.path(), {"submit", two, "--config", config, "--prompt-file",
                   dir.path() + "/added-prompt.txt", "--reference-file", ref, "--width", "416",
                   "--height", "736", "--seconds", "5", "--count", "1", "--seed", "3000"});
  INFO(sub_out);
  REQUIRE(sub_rc == 0);
  std::filesystem::remove_all(dir.path() + "/cli-refs");
  const std::string ref_sha = vidline::to_hex(vidline::sha256_of("a reference for the added job"));
  std::set<std::string> pools;
  for (auto& id : {one, two}) {
    auto st = wait_status(cl, id, 90, [](const json& s) { return s["state"] != "running"; });
    INFO(st.dump(2));
    REQUIRE(st["state"] == "succeeded");
    for (auto& j : st["jobs"]) {
      CHECK(contract_problem(j) == "");
      pools.insert(j["pool"].get<std::string>());
    }
    if (id == two) {
      REQUIRE(st["jobs"].size() == 4);
      CHECK(st["jobs"][3]["reference_sha256"] == ref_sha);
    }
  }
  CHECK(pools == std::set<std::string>{"four_a", "four_b", "xtx"});
  // `vidline runs --json` lists both, done.
  auto [rc, out] = vidline_cli(dir.path(), {"runs", "--config", config, "--json"});
  REQUIRE(rc == 0);
  // One shape with GET /v1/runs (docs/http.md): {runs, latest}.
  auto listing = json::parse(out);
  CHECK(listing["latest"] == two);
  auto list = listing["runs"];
  REQUIRE(list.size() == 2);
  CHECK(list[0]["run_id"] == one);
  CHECK(list[1]["run_id"] == two);
  CHECK(list[1]["done"] == 4);
  CHECK(list[1]["total"] == 4);
  CHECK(list[1]["state"] == "succeeded");
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

TEST_CASE("cancel frees a pool within one status interval, a coordinator kill keeps it cancelled") {
  temp_dir dir;
  // A slow clock (1 simulated s = 50 ms): a sampling job runs for seconds.
  auto config = write_reference_config(dir.path(), 0.05);
  auto cluster = vidline::config::load(config);
  const double interval_s = cluster.knobs.status_interval_ms / 1000.0;
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch(3, "queue-cancel"));
  auto sampling = wait_status(cl, run_id, 30, [](const json& s) {
    return s["jobs"][2]["state"] == "sampling" && s["jobs"][2]["pool"] == "xtx";
  });
  REQUIRE(sampling["jobs"][2]["pool"] == "xtx");
  REQUIRE(pool_busy(cl, "xtx"));

  auto [rc, out] = vidline_cli(dir.path(), {"cancel", run_id, "--config", config, "--json"});
  auto cancelled_at = std::chrono::steady_clock::now();
  INFO(out);
  REQUIRE(rc == 0);
  auto answer = json::parse(out);
  CHECK(answer["cancelled"] == 3);
  CHECK(answer["state"] == "cancelled");
  // The pool stops its sampler and reports idle: free within one status interval.
  while (pool_busy(cl, "xtx")
         && std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the status
  double freed_after =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled_at).count();
  std::printf("cancel: xtx free %.3f s after the cancel (status interval %.3f s)\n",
              freed_after, interval_s);
  CHECK(freed_after <= interval_s);
  auto st = cl.status(run_id, 2000);
  REQUIRE(st);
  CHECK((*st)["state"] == "cancelled");
  for (auto& j : (*st)["jobs"])
    CHECK(j["state"] == "cancelled");
  // wait's exit code for a cancelled run.
  CHECK(vidline_cli(dir.path(), {"wait", run_id, "--config", config}).first
        == vidline::nodes::verbs::exit_code::cancelled);

  // kill -9 of the coordinator's host: the run is still cancelled after the restart, and
  // nothing of it is made.
  a->signal(SIGKILL);
  REQUIRE(a->wait(10) == 128 + SIGKILL);
  a = start_node(dir.path(), config, "host_a");
  REQUIRE(coordinator_answers(cl, 30));
  // A new run goes on beside it and finishes; the cancelled one stays as it was.
  auto next = cl.submit(batch(1, "queue-after"));
  auto done = wait_status(cl, next, 90, [](const json& s) { return s["state"] != "running"; });
  CHECK(done["state"] == "succeeded");
  auto after = cl.status(run_id, 2000);
  REQUIRE(after);
  INFO(after->dump(2));
  CHECK((*after)["state"] == "cancelled");
  for (auto& j : (*after)["jobs"])
    CHECK(j["state"] == "cancelled");
  CHECK((*after)["summary"]["cancelled"] == 3);
  std::vector<std::string> data{dir.path() + "/host_a", dir.path() + "/host_b"};
  CHECK(ledger_counts(data, run_id, "decoded").empty());
  // A job of a finished run cannot be cancelled again; an unknown run is exit code 7.
  CHECK(vidline_cli(dir.path(), {"cancel", "no-such-run", "--config", config}).first
        == vidline::nodes::verbs::exit_code::no_such_run);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
