// Outputs collected between two real hosts (docs/shots.md, "Collecting the outputs"): node
// processes in two network namespaces joined by a veth pair (tests/support/netns.hpp),
// CURVE on the link. The run's videos are decoded on host_b; `vidline wait --collect`
// runs in host_a's namespace and pulls them over the bus: each collected file reads as the
// sim contract says and as the index says. Tagged [netns]; root only, skipped otherwise.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/sha256.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/netns.hpp"

using namespace testing_support;
using vidline::nodes::coordinator_client;

TEST_CASE("videos decoded on one host are collected on the other over the bus", "[netns]") {
  if (!netns_available()) {
    WARN("skipped: needs root, ip netns and nft");
    return;
  }
  temp_dir dir("vl-netns-collect");
  netns_pair net;
  auto cfg = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/reference.json"));
  cfg["hosts"][0]["address"] = netns_pair::address_a();
  cfg["hosts"][1]["address"] = netns_pair::address_b();
  for (std::size_t i = 0; i < 2; ++i)
    cfg["hosts"][i]["data_dir"] = dir.path() + "/" + cfg["hosts"][i]["name"].get<std::string>();
  cfg["backends"]["sim"]["time_scale"] = 0.005;
  add_keys(cfg, dir.path());  // not loopback: CURVE
  const std::string config = dir.path() + "/cluster.json";
  std::ofstream(config) << cfg.dump(2);

  auto start = [&](const std::string& ns, const std::string& host) {
    return std::make_unique<process>(
      netns_pair::exec_in(ns, {VIDLINE_BINARY, "node", "--config", config, "--host", host}),
      dir.path() + "/" + host + ".out");
  };
  auto a = start(net.a(), "host_a");
  auto b = start(net.b(), "host_b");
  std::string run_id;
  {
    netns_pair::entered in_a(net.a());
    coordinator_client cl(vidline::config::load(config));
    REQUIRE(coordinator_answers(cl, 30));
    vidline::msg::submit_run r;
    r.mode = "four_four_plus_one";  // its one decoder, rtx3080ti, is on host_b
    r.prompt = "collect over the link";
    r.width = 416;
    r.height = 736;
    r.seconds = 5;
    r.count = 3;
    r.seed = 77;
    r.request_id = "netns-collect";
    run_id = cl.submit(r);
  }
  const std::string out = dir.path() + "/collected";
  process wait(netns_pair::exec_in(net.a(), {VIDLINE_BINARY, "wait", run_id, "--config", config,
                                             "--json", "--collect", out}),
               dir.path() + "/wait.out");
  REQUIRE(wait.wait(120) == 0);
  INFO(wait.err());
  CHECK(wait.err().find("collected 3 video(s) into " + out) != std::string::npos);
  auto st = json::parse(wait.out());
  REQUIRE(st["jobs"].size() == 3);
  std::map<std::string, json> index;
  {
    std::ifstream in(out + "/index.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto l = json::parse(line);
      CHECK(index.count(l["name"]) == 0);
      index[l["name"].get<std::string>()] = l;
    }
  }
  CHECK(index.size() == 3);
  for (auto& j : st["jobs"]) {
    INFO(j.dump());
    CHECK(j["decoder"] == "rtx3080ti");
    CHECK(contract_problem(j) == "");  // the file on host_b
    const std::string file = std::filesystem::path(j["output"].get<std::string>()).filename();
    const std::string got = read_file(out + "/" + file);
    CHECK(got == contract::video_file(j["latent_sha256"].get<std::string>(), j["seed"],
                                      j["width"], j["height"], j["seconds"]));
    const std::string name = file.substr(0, file.rfind('.'));
    REQUIRE(index.count(name) == 1);
    CHECK(index[name]["output_sha256"] == vidline::to_hex(vidline::sha256_of(got)));
    CHECK(index[name]["output_sha256"] == j["output_sha256"]);
    CHECK(index[name]["decoder"] == "rtx3080ti");
  }
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
