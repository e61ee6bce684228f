// Verdicts in the run index on the host that holds the video, with real node processes on
// loopback: the coordinator on host_a, every video on host_b (its decoder, the reference
// line's). A verdict given while host_b is up lands in host_b's index; one given while
// host_b is down, the coordinator then killed and restarted, lands there once host_b is
// back; the coordinator forgets finished runs at once (finished_run_memory_s 0), so the
// run comes back from its journal for the verdict and is held until host_b confirmed it.
// `wait --collect` carries the verdicts in its index, and a later collection adds one given
// since; so does host_a's own collection (collect_dir). Each verdict's line is written
// once however often it was sent.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "nodes/http_review.hpp"
#include "nodes/verbs/coordinator_client.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
namespace fs = std::filesystem;

namespace {

/// A verdict as the review page gives it (the client side of POST .../review).
vidline::msg::review_reply give(const vidline::config::cluster& c, const std::string& run_id,
                                uint32_t index, const char* verdict) {
  vidline::msg::review_take t;
  t.run_id = run_id;
  t.index = index;
  t.verdict = verdict;
  return vidline::nodes::verbs::coordinator_client(c).review(t, 10000);
}

/// The last line of each name in an index (none: the file is not there yet).
std::map<std::string, json> last_lines(const std::string& index) {
  std::vector<std::string> repeated;
  if (!fs::exists(index))
    return {};
  return read_index(index, repeated);
}

std::size_t line_count(const std::string& index) {
  std::ifstream in(index);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);)
    ++n;
  return n;
}

/// Whether `name`'s last line in `index` says `verdict` at `revision`.
bool says(const std::string& index, const std::string& name, const std::string& verdict,
          uint32_t revision) {
  auto lines = last_lines(index);
  auto it = lines.find(name);
  return it != lines.end() && it->second.contains("review") && it->second["review"].is_object()
         && it->second["review"]["verdict"] == verdict
         && it->second["review"]["revision"] == revision;
}

/// Polls `done` until it holds or `seconds` pass.
template <class Pred>
bool eventually(double seconds, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the index file
  }
  return done();
}

int cli(const std::string& dir, const std::vector<std::string>& args, std::string* out = nullptr) {
  static int n = 0;
  std::vector<std::string> argv{VIDLINE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  process p(argv, dir + "/cli." + std::to_string(n++) + ".out");
  const int rc = p.wait(60);
  if (out != nullptr)
    *out = p.out() + p.err();
  return rc;
}

} // namespace

TEST_CASE("verdicts reach the run index on the video's host, down at the time or not, and the collected index",
          "[integration][review]") {
  temp_dir dir{"vl-verdicts"};
  const auto config = write_reference_config(
    dir.path(), 0.01,
    {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 3}, {"status_interval_ms", 100},
     {"order_resend_ms", 400}, {"reconnect_max_ms", 500}, {"lease_ms", 1000},
     {"finished_run_memory_s", 0}, {"collect_interval_ms", 200}});
  {
    // host_a also collects every run's videos by itself.
    auto cfg = json::parse(read_file(config));
    cfg["hosts"][0]["collect_dir"] = dir.path() + "/kept";
    std::ofstream(config) << cfg.dump(2);
  }
  const std::string a = dir.path() + "/host_a", b = dir.path() + "/host_b";
  std::map<std::string, std::unique_ptr<process>> nodes;
  nodes["host_a"] = start_node(dir.path(), config, "host_a");
  nodes["host_b"] = start_node(dir.path(), config, "host_b");
  struct stop_all {
    std::map<std::string, std::unique_ptr<process>>& nodes;
    ~stop_all() {
      for (auto& [h, p] : nodes)
        if (p && p->running()) {
          p->signal(SIGTERM);
          p->wait(20);
        }
    }
  } stopper{nodes};
  auto cluster = vidline::config::load(config);
  vidline::nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  std::ofstream(dir.path() + "/shots.jsonl")
    << R"({"name": "harbour", "prompt": "a harbour at dawn", "width": 416, "height": 736, "seconds": 5, "seed": 1})" "\n"
    << R"({"name": "night", "prompt": "a night market in the rain", "width": 416, "height": 736, "seconds": 5, "seed": 2})" "\n"
    << R"({"name": "market", "prompt": "a fish market at noon", "width": 416, "height": 736, "seconds": 5, "seed": 3})" "\n";
  const auto run_id = submit_shot_list(dir.path(), config, "four_four_plus_one",
                                       dir.path() + "/shots.jsonl");
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2).substr(0, 3000));
  REQUIRE(st["state"] == "succeeded");
  for (auto& j : st["jobs"]) {
    REQUIRE(j["decoder"] == "rtx3080ti");
    REQUIRE(j["output"].get<std::string>().rfind(b + "/outputs/" + run_id + "/", 0) == 0);
  }
  const std::string b_index = b + "/outputs/" + run_id + "/index.jsonl";
  REQUIRE(line_count(b_index) == 3);

  // host_b up: the verdict lands in its index at once; nothing on the coordinator's host.
  auto r = give(cluster, run_id, 0, "accept");
  REQUIRE(r.error.empty());
  CHECK(r.verdict == "accepted");
  CHECK(eventually(30, [&] { return says(b_index, "harbour", "accepted", 1); }));
  CHECK_FALSE(fs::exists(a + "/outputs/" + run_id));

  // host_b down: the verdict is journaled and answered; the index on host_b has no word of
  // it. Then the coordinator is killed and started again while host_b is still down.
  nodes["host_b"]->signal(SIGKILL);
  nodes["host_b"]->wait(20);
  r = give(cluster, run_id, 1, "reject");
  REQUIRE(r.error.empty());
  CHECK(r.verdict == "rejected");
  nodes["host_a"]->signal(SIGKILL);
  nodes["host_a"]->wait(20);
  nodes["host_a"] = start_node(dir.path(), config, "host_a");
  REQUIRE(coordinator_answers(cl, 30));
  st = wait_status(cl, run_id, 30, [](const json& s) {
    return s["jobs"].size() == 3 && s["jobs"][1]["review"].is_object();
  });
  CHECK(st["jobs"][1]["review"]["verdict"] == "rejected");
  CHECK(st["jobs"][1]["review"]["revision"] == 1);
  CHECK_FALSE(says(b_index, "night", "rejected", 1));
  // The coordinator holds the run for it (forgotten at once otherwise).
  auto listed = cl.runs(true);
  bool held = false;
  for (auto& run : listed)
    held = held || (run["run_id"] == run_id && run["from_journal"] == false);
  CHECK(held);

  // host_b back: the verdict comes to it.
  nodes["host_b"] = start_node(dir.path(), config, "host_b");
  CHECK(eventually(60, [&] { return says(b_index, "night", "rejected", 1); }));
  CHECK(says(b_index, "harbour", "accepted", 1));
  CHECK(line_count(b_index) == 5);  // three videos, two verdicts: each once
  // Confirmed, the run is let go (forgotten: its entry read from the journal).
  CHECK(eventually(30, [&] {
    for (auto& run : cl.runs(true))
      if (run["run_id"] == run_id)
        return run["from_journal"] == true;
    return false;
  }));

  // A collection after the verdicts carries them in its index.
  const std::string out = dir.path() + "/collected";
  std::string said;
  REQUIRE(cli(dir.path(), {"wait", run_id, "--config", config, "--collect", out}, &said) == 0);
  INFO(said);
  auto collected = last_lines(out + "/index.jsonl");
  REQUIRE(collected.size() == 3);
  CHECK(collected["harbour"]["review"]["verdict"] == "accepted");
  CHECK(collected["night"]["review"]["verdict"] == "rejected");
  CHECK_FALSE(collected["market"].contains("review"));
  CHECK(line_count(out + "/index.jsonl") == 3);

  // Verdicts after the collection: harbour changed (revision 2), market given. Each reaches
  // host_b's index; the next collection into the same folder adds them there.
  REQUIRE(give(cluster, run_id, 0, "reject").error.empty());
  REQUIRE(give(cluster, run_id, 2, "accept").error.empty());
  CHECK(eventually(30, [&] {
    return says(b_index, "harbour", "rejected", 2) && says(b_index, "market", "accepted", 1);
  }));
  REQUIRE(cli(dir.path(), {"wait", run_id, "--config", config, "--collect", out}, &said) == 0);
  collected = last_lines(out + "/index.jsonl");
  CHECK(collected["harbour"]["review"]["verdict"] == "rejected");
  CHECK(collected["harbour"]["review"]["revision"] == 2);
  CHECK(collected["market"]["review"]["verdict"] == "accepted");
  CHECK(collected["night"]["review"]["verdict"] == "rejected");
  CHECK(line_count(out + "/index.jsonl") == 5);
  // Collected again with nothing new: nothing added.
  REQUIRE(cli(dir.path(), {"wait", run_id, "--config", config, "--collect", out}) == 0);
  CHECK(line_count(out + "/index.jsonl") == 5);
  CHECK(line_count(b_index) == 7);

  // The host that collects by itself has them too: the run's entry counts its verdicts.
  const std::string kept = dir.path() + "/kept/" + run_id + "/index.jsonl";
  CHECK(eventually(60, [&] {
    return says(kept, "harbour", "rejected", 2) && says(kept, "night", "rejected", 1)
           && says(kept, "market", "accepted", 1);
  }));
}
