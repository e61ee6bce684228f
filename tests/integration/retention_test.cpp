// Retention (docs/reliability.md, "Retention") with real nodes: a finished run
// leaves the coordinator's memory after finished_run_memory_s and status, runs, wait and
// resume still answer for it from the journal; with journal_keep_finished_s it leaves the
// journal too and the file gives the space back; a coordinator killed between deleting
// and vacuuming (crash point journal.before_vacuum) restarts with a consistent journal.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>

#include <httplib.h>

#include "tests/support/cluster.hpp"
#include "tests/support/journal_query.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

vidline::msg::submit_run small_run(const std::string& request_id, uint32_t count) {
  vidline::msg::submit_run req;
  req.mode = "four_four_xtx_plus_one";
  req.prompt = "retention " + request_id;
  req.width = 256;
  req.height = 448;
  req.seconds = 3;
  req.count = count;
  req.seed = 5;
  req.request_id = request_id;
  return req;
}

/// The runs listing's entry of `run_id` (null when it is not listed).
json listed(coordinator_client& cl, const std::string& run_id) {
  for (auto& r : cl.runs(true))
    if (r["run_id"] == run_id)
      return r;
  return nullptr;
}

/// Polls until `pred()` holds or `seconds` pass.
template <class Pred>
bool eventually(double seconds, Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (pred())
        return true;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling pace
  }
  return false;
}

uint64_t journal_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir + "/host_a/journal", ec))
    if (e.is_regular_file(ec))
      n += e.file_size(ec);
  return n;
}

/// One integer a pragma (or query) answers on host_a's journal, opened read-only.
int64_t journal_value(const std::string& dir, const char* sql) {
  return journal_query::integer(dir + "/host_a/journal/journal.db", sql);
}

std::string journal_text(const std::string& dir, const char* sql) {
  return journal_query::text(dir + "/host_a/journal/journal.db", sql);
}

json knobs(int memory_s, int keep_s) {
  return {{"finished_run_memory_s", memory_s}, {"journal_keep_finished_s", keep_s}};
}

} // namespace

TEST_CASE("a forgotten run: status, runs, wait and resume answer from the journal") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.02, knobs(1, 0));
  // The coordinator's host serves the HTTP API too.
  const int http_port = free_ports(1)[0];
  const std::string token = "retention-token-0123456789";
  {
    auto cfg = json::parse(read_file(config));
    std::ofstream(dir.path() + "/token") << token << "\n";
    cfg["hosts"][0]["http"] = {{"port", http_port}, {"token_file", dir.path() + "/token"}};
    std::ofstream(config) << cfg.dump(2);
  }
  const httplib::Headers auth{{"Authorization", "Bearer " + token}};
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  REQUIRE(line_reported(cl, 30));
  auto run_id = cl.submit(small_run("forget-me", 3));
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump());
  REQUIRE(st["state"] == "succeeded");
  CHECK(st["from_journal"] == false);

  // Forgotten a second (and a tick) later: the listing marks it as read from the journal.
  REQUIRE(eventually(20, [&] {
    auto r = listed(cl, run_id);
    return r.is_object() && r["from_journal"] == true;
  }));
  auto entry = listed(cl, run_id);
  CHECK(entry["state"] == "succeeded");
  CHECK(entry["total"] == 3);
  CHECK(entry["succeeded"] == 3);
  // Without --all too (a finished run among the newest 20).
  bool in_short_list = false;
  for (auto& r : cl.runs(false))
    in_short_list = in_short_list || (r["run_id"] == run_id && r["from_journal"] == true);
  CHECK(in_short_list);

  // Its status, whole and by pages, from the journal: the same jobs, every one verified.
  auto old = cl.status(run_id);
  REQUIRE(old);
  CHECK((*old)["from_journal"] == true);
  CHECK((*old)["state"] == "succeeded");
  REQUIRE((*old)["jobs"].size() == 3);
  for (auto& j : (*old)["jobs"])
    CHECK(contract_problem(j).empty());
  CHECK((*old)["jobs"] == st["jobs"]);
  auto page = cl.status_page(run_id, 1, 1);
  REQUIRE(page);
  REQUIRE((*page)["jobs"].size() == 1);
  CHECK((*page)["jobs"][0]["index"] == 1);
  // "" = the latest run: the journal's when memory holds none.
  auto latest = cl.status("");
  REQUIRE(latest);
  CHECK((*latest)["run_id"] == run_id);

  // The HTTP API: the run's status and the listing, from the journal; the counter.
  httplib::Client http("127.0.0.1", http_port);
  auto hs = http.Get(("/v1/runs/" + run_id).c_str(), auth);
  REQUIRE(hs);
  CHECK(hs->status == 200);
  auto hj = json::parse(hs->body);
  CHECK(hj["from_journal"] == true);
  CHECK(hj["jobs"].size() == 3);
  auto hl = http.Get("/v1/runs?all=true", auth);
  REQUIRE(hl);
  CHECK(hl->status == 200);
  INFO(hl->body);
  const auto listing = json::parse(hl->body);
  bool http_listed = false;
  for (auto& r : listing["runs"])
    http_listed = http_listed || (r["run_id"] == run_id && r["from_journal"] == true);
  CHECK(http_listed);
  auto hm = http.Get("/metrics", auth);
  REQUIRE(hm);
  CHECK(hm->body.find("vidline_runs_forgotten_total 1") != std::string::npos);
  CHECK(http.Get("/v1/runs/20000101-000000-dead", auth)->status == 404);

  // `vidline wait` and `vidline status` (the CLI) answer as for a run in memory.
  process wait({VIDLINE_BINARY, "wait", run_id, "--config", config}, dir.path() + "/wait.out");
  CHECK(wait.wait(30) == 0);
  process status({VIDLINE_BINARY, "status", run_id, "--config", config, "--json"},
                 dir.path() + "/status.out");
  CHECK(status.wait(30) == 0);
  CHECK(json::parse(read_file(dir.path() + "/status.out"))["run_id"] == run_id);

  // resume of a forgotten run without failed jobs: nothing to reopen, no error; it stays
  // forgotten. An unknown run is still no run.
  auto res = cl.resume(run_id);
  CHECK(res.error.empty());
  CHECK(res.reopened == 0);
  CHECK(res.state == "succeeded");
  CHECK(listed(cl, run_id)["from_journal"] == true);
  CHECK_THROWS(cl.resume("20000101-000000-dead"));

  // A journal created now is in auto_vacuum=INCREMENTAL.
  CHECK(journal_value(dir.path(), "PRAGMA auto_vacuum") == 2);  // INCREMENTAL
}

TEST_CASE("journal_keep_finished_s: a finished run leaves the journal and the file shrinks") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.02, knobs(1, 3));
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  REQUIRE(line_reported(cl, 30));
  // Runs one after another, each with a large prompt so its records take many pages.
  std::vector<std::string> ids;
  uint64_t peak = 0;
  for (int k = 0; k < 3; ++k) {
    auto req = small_run("keep-" + std::to_string(k), 6);
    req.prompt += std::string(20000, 'x');
    auto id = cl.submit(req);
    ids.push_back(id);
    auto st = wait_status(cl, id, 120, [](const json& s) { return s["state"] != "running"; });
    REQUIRE(st["state"] == "succeeded");
    peak = std::max(peak, journal_bytes(dir.path()));
  }
  // Each leaves the journal 3 s after it finished: no run, neither in memory nor recorded.
  for (auto& id : ids) {
    INFO(id);
    CHECK(eventually(30, [&] { return !listed(cl, id).is_object(); }));
    CHECK(eventually(10, [&] {
      try {
        cl.status(id, 1000);
        return false;
      } catch (const vidline::nodes::verbs::coordinator_error& e) {
        return true;  // no run
      }
    }));
  }
  CHECK(journal_value(dir.path(), "SELECT COUNT(*) FROM runs") == 0);
  CHECK(journal_value(dir.path(), "SELECT COUNT(*) FROM jobs") == 0);
  CHECK(journal_value(dir.path(), "PRAGMA freelist_count") == 0);
  const uint64_t after = journal_bytes(dir.path());
  INFO("peak " << peak << " B, after the drops " << after << " B");
  CHECK(after < peak);
}

TEST_CASE("a coordinator killed between deleting runs and vacuuming restarts consistent") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.02, knobs(1, 2));
  auto cluster = vidline::config::load(config);
  ::setenv("VIDLINE_CRASH", "1:1:journal.before_vacuum", 1);
  auto a = start_node(dir.path(), config, "host_a");
  ::unsetenv("VIDLINE_CRASH");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  REQUIRE(line_reported(cl, 30));
  auto req = small_run("crash", 4);
  req.prompt += std::string(20000, 'y');
  auto id = cl.submit(req);
  auto st = wait_status(cl, id, 120, [](const json& s) { return s["state"] != "running"; });
  REQUIRE(st["state"] == "succeeded");
  // The drop fires the crash point: the node exits with the crash points' code.
  CHECK(a->wait(30) == 86);
  // The delete was committed, the vacuum not done.
  CHECK(journal_value(dir.path(), "SELECT COUNT(*) FROM runs") == 0);
  CHECK(journal_value(dir.path(), "PRAGMA freelist_count") > 0);
  // Restarted (no crash point): consistent, the space given back, the line works.
  a = start_node(dir.path(), config, "host_a");
  REQUIRE(coordinator_answers(cl, 30));
  CHECK(journal_text(dir.path(), "PRAGMA integrity_check") == "ok");
  CHECK(eventually(10, [&] {
    return journal_value(dir.path(), "PRAGMA freelist_count") == 0;
  }));
  CHECK_THROWS_AS(cl.status(id, 2000), vidline::nodes::verbs::coordinator_error);
  REQUIRE(line_reported(cl, 30));
  auto next = cl.submit(small_run("after-crash", 2));
  auto st2 = wait_status(cl, next, 120, [](const json& s) { return s["state"] != "running"; });
  CHECK(st2["state"] == "succeeded");
}

TEST_CASE("vidline resume of a forgotten run with failed jobs loads it back and finishes it") {
  temp_dir dir;
  auto k = knobs(1, 0);
  k["max_attempts"] = 1;
  auto config = write_reference_config(dir.path(), 0.005, k);
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  auto req = small_run("forgotten-failed", 3);
  req.mode = "four_four_plus_one";
  auto run_id = cl.submit(req);
  // Block the run's output directory with a plain file: every decode fails (recovery_test).
  auto outputs = dir.path() + "/host_b/outputs";
  std::filesystem::create_directories(outputs);
  std::ofstream(outputs + "/" + run_id) << "in the way";
  auto failed = wait_status(cl, run_id, 60, [](const json& s) { return s["state"] != "running"; });
  INFO(failed.dump());
  REQUIRE(failed["state"] == "failed");
  REQUIRE(eventually(20, [&] {
    auto r = listed(cl, run_id);
    return r.is_object() && r["from_journal"] == true;
  }));
  std::filesystem::remove(outputs + "/" + run_id);

  process resume({VIDLINE_BINARY, "resume", run_id, "--config", config, "--json", "--timeout",
                  "60"},
                 dir.path() + "/resume.out");
  REQUIRE(resume.wait(90) == 0);
  auto st = json::parse(resume.out());
  INFO(st.dump());
  CHECK(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 3);
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  // The latents were kept for the failed jobs: decoded again, not sampled again.
  auto sampled = ledger_counts({dir.path() + "/host_a", dir.path() + "/host_b"}, run_id, "sampled");
  for (int i = 0; i < 3; ++i)
    CHECK(sampled[i] == 1);
  // Finished again: forgotten again, and still answered.
  CHECK(eventually(20, [&] {
    auto r = listed(cl, run_id);
    return r.is_object() && r["from_journal"] == true && r["state"] == "succeeded";
  }));
}
