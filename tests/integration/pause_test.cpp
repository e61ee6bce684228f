// A pause is not a death, with real node processes on loopback: three hosts,
// the coordinator and the pools on host_a, a decoder on host_b and one on host_c. A host
// is stopped with SIGSTOP for seconds, then continued; every host's ledger and output
// folder is read afterwards: no job is decoded twice, whichever host was paused.

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "tests/support/cluster.hpp"

using namespace testing_support;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> hosts{"host_a", "host_b", "host_c"};

/// The reference line plus host_c, a copy of host_b with a decoder of its own, and a mode
/// decoding on both.
std::string write_three_host_config(const std::string& dir, double time_scale) {
  auto cfg = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR)
                                   + "/config/examples/reference.json"));
  json c = cfg["hosts"][1];
  c["name"] = "host_c";
  cfg["hosts"].push_back(c);
  json d = cfg["decoders"][0];
  d["name"] = "dec_c";
  d["host"] = "host_c";
  cfg["decoders"].push_back(d);
  cfg["modes"]["two_decoders"] = {{"pools", {"eight"}}, {"decoders", {"rtx3080ti", "dec_c"}}};
  const auto n = cfg["hosts"].size();
  auto ports = free_ports(static_cast<int>(n));
  for (std::size_t i = 0; i < n; ++i) {
    cfg["hosts"][i]["port"] = ports[i];
    cfg["hosts"][i].erase("bulk_port");
    cfg["hosts"][i]["data_dir"] = dir + "/" + cfg["hosts"][i]["name"].get<std::string>();
  }
  add_keys(cfg, dir);
  cfg["backends"]["sim"]["time_scale"] = time_scale;
  cfg["knobs"] = {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 3},
                  {"status_interval_ms", 100},    {"order_resend_ms", 400},
                  {"reconnect_max_ms", 500},      {"lease_ms", 1000},
                  {"max_attempts", 5}};
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// What every host's files say about a run: decoded ledger lines and video files per job.
struct on_disk {
  std::map<int, int> decoded;  ///< "decoded" lines less "removed-decoded" lines
  std::map<int, int> videos;   ///< job-<i>-*.simvideo files, every host
  int fenced = 0;              ///< "fenced-decoded" and "fenced-sampled" lines
};

on_disk read_disks(const std::string& dir, const std::string& run_id) {
  on_disk out;
  std::vector<std::string> dirs;
  for (auto& h : hosts)
    dirs.push_back(dir + "/" + h);
  out.decoded = ledger_counts(dirs, run_id, "decoded");
  for (auto& [i, n] : ledger_counts(dirs, run_id, "removed-decoded"))
    out.decoded[i] -= n;
  for (auto& [i, n] : ledger_counts(dirs, run_id, "fenced-decoded"))
    out.fenced += n;
  for (auto& [i, n] : ledger_counts(dirs, run_id, "fenced-sampled"))
    out.fenced += n;
  for (auto& d : dirs) {
    const fs::path runs = d + "/outputs/" + run_id;
    if (!fs::exists(runs))
      continue;
    for (auto& f : fs::directory_iterator(runs)) {
      const auto name = f.path().filename().string();
      if (name.rfind("job-", 0) != 0)
        continue;
      ++out.videos[std::stoi(name.substr(4))];
    }
  }
  return out;
}

struct line {
  temp_dir dir{"vl-pause"};
  std::string config;
  std::map<std::string, std::unique_ptr<process>> nodes;

  explicit line(double time_scale) : config(write_three_host_config(dir.path(), time_scale)) {
    for (auto& h : hosts)
      nodes[h] = start_node(dir.path(), config, h);
  }
  ~line() {
    for (auto& [h, p] : nodes)
      if (p && p->running()) {
        p->signal(SIGCONT);
        p->signal(SIGTERM);
        p->wait(20);
      }
  }
  std::string log(const std::string& host) const {
    return read_file(dir.path() + "/" + host + "/logs/node.log");
  }
};

/// The first job of `st` decoding, or -1.
int decoding_job(const json& st, std::string* decoder) {
  if (!st.contains("jobs"))
    return -1;
  for (auto& j : st["jobs"])
    if (j["state"] == "decoding" && j["decoder"].is_string()) {
      *decoder = j["decoder"].get<std::string>();
      return j["index"].get<int>();
    }
  return -1;
}

void check_once(const line& l, const std::string& run_id, const json& st) {
  REQUIRE(st["state"] == "succeeded");
  auto disk = read_disks(l.dir.path(), run_id);
  for (auto& j : st["jobs"]) {
    const int i = j["index"].get<int>();
    INFO("job " << i);
    CHECK(contract_problem(j) == "");
    CHECK(disk.decoded[i] == 1);
    CHECK(disk.videos[i] == 1);
    CHECK(j["done_twice"] == 0);
  }
  CHECK(st["summary"]["done_twice"] == 0);
}

} // namespace

TEST_CASE("a decoder's host paused past its lease: its video is fenced, not published twice",
          "[integration][pause]") {
  line l(0.05);
  auto cluster = vidline::config::load(l.config);
  vidline::nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  vidline::msg::submit_run req;
  req.mode = "two_decoders";
  req.prompt = "a pause is not a death";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 2;
  req.seed = 4242;
  req.request_id = "pause-decoder";
  const auto run_id = cl.submit(req, 10000);
  std::string decoder;
  int job = -1;
  wait_status(cl, run_id, 60, [&](const json& st) {
    job = decoding_job(st, &decoder);
    return job >= 0;
  });
  REQUIRE(job >= 0);
  const std::string host = decoder == "dec_c" ? "host_c" : "host_b";
  // Stopped mid-decode for 5.8 s: declared down, its lease runs out, the job moves.
  l.nodes[host]->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(5800));  // the fault's length
  l.nodes[host]->signal(SIGCONT);
  auto st = wait_status(cl, run_id, 90, [](const json& s) { return s["state"] != "running"; });
  INFO(l.log("host_a"));
  check_once(l, run_id, st);
  // The paused decoder's attempt ends after it wakes without publishing anything: its
  // video removed and counted (it was decoding), dropped before a video (fetching, or
  // waiting behind another), or its fetch failed (the latent was released meanwhile).
  // Done when the coordinator's view of the cluster shows that decoder holding nothing.
  json cluster_view;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (auto c = cl.status("@cluster", 1000)) {
        cluster_view = *c;
        auto& d = (*c)["decoders"][decoder];
        if (d["alive"] == true && d["holding"] == 0 && d["pending"] == 0)
          break;
      }
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling the coordinator
  }
  INFO(cluster_view.dump());
  INFO(l.log(host));
  REQUIRE(cluster_view["decoders"][decoder]["holding"] == 0);
  if (l.log(host).find("the video is removed") != std::string::npos) {
    CHECK(read_disks(l.dir.path(), run_id).fenced >= 1);
    CHECK(cluster_view["decoders"][decoder]["fenced"].get<int>() >= 1);
    st = wait_status(cl, run_id, 10, [](const json& s) { return s["summary"]["fenced"] >= 1; });
    CHECK(st["summary"]["fenced"].get<int>() >= 1);
  }
  check_once(l, run_id, st);
}

TEST_CASE("the coordinator's host paused: healthy peers are not declared down on waking",
          "[integration][pause]") {
  line l(0.05);
  auto cluster = vidline::config::load(l.config);
  vidline::nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  vidline::msg::submit_run req;
  req.mode = "two_decoders";
  req.prompt = "a pause is not a death";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 3;
  req.seed = 777;
  req.request_id = "pause-coordinator";
  const auto run_id = cl.submit(req, 10000);
  std::string decoder;
  wait_status(cl, run_id, 60, [&](const json& st) { return decoding_job(st, &decoder) >= 0; });
  REQUIRE(!decoder.empty());
  // alpha frozen for 4.15 s while a decoder finishes its job.
  l.nodes["host_a"]->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(4150));  // the fault's length
  l.nodes["host_a"]->signal(SIGCONT);
  auto st = wait_status(cl, run_id, 90, [](const json& s) { return s["state"] != "running"; });
  const auto log = l.log("host_a");
  INFO(log);
  check_once(l, run_id, st);
  CHECK(log.find("was not running for") != std::string::npos);
  // Neither decoder's host (both ran all along, same boot) was declared down by alpha.
  CHECK(log.find("peer_down host_b") == std::string::npos);
  CHECK(log.find("peer_down host_c") == std::string::npos);
}
