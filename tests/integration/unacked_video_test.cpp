// A video published but never acknowledged, with real node processes on loopback: the
// coordinator and the pool on host_a, a decoder on host_b and one on host_c (not started
// yet, so host_b's decoder gets the job). host_b dies (crash point video.after_index)
// right after it published its video, before anyone heard of it; host_c starts and, once
// host_b's lease ran out, decodes the job again. When host_b comes back its decoder reports
// the kept result: the coordinator answers discard, and host_b's video and its index line
// go, counted in the run's status and the ledger.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/crash_points.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
namespace fs = std::filesystem;

namespace {

/// The reference line plus host_c, a copy of host_b with a decoder of its own, and a mode
/// sampling on host_a and decoding on host_b or host_c.
std::string write_config(const std::string& dir) {
  auto cfg = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR)
                                   + "/config/examples/reference.json"));
  json c = cfg["hosts"][1];
  c["name"] = "host_c";
  cfg["hosts"].push_back(c);
  json d = cfg["decoders"][0];
  d["name"] = "dec_c";
  d["host"] = "host_c";
  cfg["decoders"].push_back(d);
  cfg["modes"]["b_or_c"] = {{"pools", {"eight"}}, {"decoders", {"rtx3080ti", "dec_c"}}};
  const auto n = cfg["hosts"].size();
  auto ports = free_ports(static_cast<int>(n));
  for (std::size_t i = 0; i < n; ++i) {
    cfg["hosts"][i]["port"] = ports[i];
    cfg["hosts"][i].erase("bulk_port");
    cfg["hosts"][i]["data_dir"] = dir + "/" + cfg["hosts"][i]["name"].get<std::string>();
  }
  add_keys(cfg, dir);
  cfg["backends"]["sim"]["time_scale"] = 0.02;
  cfg["knobs"] = {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 3},
                  {"status_interval_ms", 100},    {"order_resend_ms", 400},
                  {"reconnect_max_ms", 500},      {"lease_ms", 1000},
                  {"max_attempts", 5}};
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// The job-0 video files under a host's outputs of the run.
std::vector<std::string> videos(const std::string& data_dir, const std::string& run_id) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(data_dir + "/outputs/" + run_id, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().rfind("job-0-", 0) == 0)
      out.push_back(it->path().string());
  return out;
}

/// The index lines of job 0 on a host.
int index_lines(const std::string& data_dir, const std::string& run_id) {
  std::vector<std::string> repeated;
  auto idx = read_index(data_dir + "/outputs/" + run_id + "/index.jsonl", repeated);
  int n = static_cast<int>(repeated.size());
  for (auto& [name, j] : idx)
    n += j["index"] == 0 ? 1 : 0;
  return n;
}

} // namespace

TEST_CASE("a video published unacknowledged, its host dead past its lease, the job decoded "
          "elsewhere: removed with its index line when its host returns",
          "[integration][recovery]") {
  temp_dir dir{"vl-unacked"};
  const auto config = write_config(dir.path());
  const std::string a = dir.path() + "/host_a", b = dir.path() + "/host_b",
                    c = dir.path() + "/host_c";
  std::map<std::string, std::unique_ptr<process>> nodes;
  nodes["host_a"] = start_node(dir.path(), config, "host_a");
  ::setenv("VIDLINE_CRASH", "1:1:video.after_index", 1);
  nodes["host_b"] = start_node(dir.path(), config, "host_b");
  ::unsetenv("VIDLINE_CRASH");
  auto cluster = vidline::config::load(config);
  vidline::nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  vidline::msg::submit_run req;
  req.mode = "b_or_c";
  req.prompt = "a video nobody heard of";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 1;
  req.seed = 77;
  req.request_id = "unacked-video";
  const auto run_id = cl.submit(req, 10000);

  // host_b publishes the video, then dies before reporting it.
  REQUIRE(nodes["host_b"]->wait(60) == vidline::crash::exit_code);
  const auto lost = videos(b, run_id);
  REQUIRE(lost.size() == 1);
  REQUIRE(index_lines(b, run_id) == 1);
  REQUIRE(fs::exists(b + "/unacked/rtx3080ti"));

  // host_c takes the job over once host_b's lease ran out.
  nodes["host_c"] = start_node(dir.path(), config, "host_c");
  auto st = wait_status(cl, run_id, 60, [](const json& s) { return s["state"] != "running"; });
  INFO(read_file(a + "/logs/node.log"));
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"][0]["decoder"] == "dec_c");
  CHECK(contract_problem(st["jobs"][0]) == "");
  CHECK(st["summary"]["done_twice"] == 0);  // nobody has heard of host_b's video yet

  // host_b returns: its kept result is reported, the coordinator answers discard.
  nodes["host_b"] = start_node(dir.path(), config, "host_b");
  st = wait_status(cl, run_id, 30,
                   [](const json& s) { return s["summary"]["products_retracted"] == 1; });
  INFO(read_file(b + "/logs/node.log"));
  CHECK(st["summary"]["products_retracted"] == 1);
  CHECK(st["summary"]["done_twice"] == 1);
  CHECK(st["jobs"][0]["products_retracted"] == 1);
  CHECK(st["jobs"][0]["decoder"] == "dec_c");
  // The removal follows the ack on host_b: wait for it.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline
         && (!videos(b, run_id).empty() || fs::exists(b + "/unacked/rtx3080ti/")
                                                 && !fs::is_empty(b + "/unacked/rtx3080ti")))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling host_b's disk
  CHECK(videos(b, run_id).empty());
  CHECK(index_lines(b, run_id) == 0);
  CHECK(fs::is_empty(b + "/unacked/rtx3080ti"));
  CHECK(ledger_counts({b}, run_id, "removed-decoded")[0] == 1);
  // The winner stands, indexed once.
  CHECK(videos(c, run_id).size() == 1);
  CHECK(index_lines(c, run_id) == 1);
  CHECK(contract_problem(st["jobs"][0]) == "");
  for (auto& [h, p] : nodes)
    if (p && p->running()) {
      p->signal(SIGTERM);
      p->wait(20);
    }
}
