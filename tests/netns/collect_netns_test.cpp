// Inputs and outputs between two real hosts (docs/shots.md): node processes in two network
// namespaces joined by a veth pair (tests/support/netns.hpp), CURVE on the link. In host_a's
// namespace `vidline run --jobs --collect` uploads each shot's reference image to the
// coordinator's node (host_a); the shots only the xtx pool holds are sampled on host_b,
// which pulls their references across the link by SHA-256 and verifies them before use.
// Every video is decoded on host_b (the mode's one decoder) and collected back on host_a
// over the link: each collected file reads as the sim contract says and as the index says.
// Tagged [netns]; root only, skipped otherwise.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/sha256.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/netns.hpp"

using namespace testing_support;

TEST_CASE("a shot list's references cross to the sampling host and its videos come back", "[netns]") {
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

  // Four shots, each its own prompt and reference; 736x1280x10 fits only xtx (host_b).
  struct shot { std::string name; uint32_t w, h, s; };
  const std::vector<shot> shots = {{"far", 736, 1280, 10}, {"near", 416, 736, 5},
                                   {"long", 736, 1280, 10}, {"end", 416, 736, 5}};
  std::filesystem::create_directories(dir.path() + "/refs");
  std::map<std::string, std::string> ref_sha;
  std::string list;
  for (auto& s : shots) {
    const std::string bytes = "reference image of " + s.name + std::string(3000, 'x');
    std::ofstream(dir.path() + "/refs/" + s.name + ".png") << bytes;
    ref_sha[s.name] = vidline::to_hex(vidline::sha256_of(bytes));
    list += json{{"prompt", "shot " + s.name}, {"width", s.w}, {"height", s.h},
                 {"seconds", s.s}, {"seed", 70 + s.s}, {"name", s.name},
                 {"reference", dir.path() + "/refs/" + s.name + ".png"}}
              .dump() + "\n";
  }
  std::ofstream(dir.path() + "/list.jsonl") << list;

  auto start = [&](const std::string& ns, const std::string& host) {
    return std::make_unique<process>(
      netns_pair::exec_in(ns, {VIDLINE_BINARY, "node", "--config", config, "--host", host}),
      dir.path() + "/" + host + ".out");
  };
  auto a = start(net.a(), "host_a");
  auto b = start(net.b(), "host_b");
  {
    netns_pair::entered in_a(net.a());
    vidline::nodes::verbs::coordinator_client cl(vidline::config::load(config));
    REQUIRE(coordinator_answers(cl, 30));
  }
  const std::string out = dir.path() + "/collected";
  process run(netns_pair::exec_in(net.a(), {VIDLINE_BINARY, "run", "--config", config, "--mode",
                                            "four_four_xtx_plus_one", "--jobs",
                                            dir.path() + "/list.jsonl", "--json", "--collect", out}),
              dir.path() + "/run.out");
  REQUIRE(run.wait(180) == 0);
  INFO(run.err());
  CHECK(run.err().find("collected 4 video(s) into " + out) != std::string::npos);
  auto st = json::parse(run.out());
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 4);
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
  CHECK(index.size() == 4);
  int on_b = 0;
  for (auto& j : st["jobs"]) {
    INFO(j.dump());
    const std::string name = j["name"];
    CHECK(j["decoder"] == "rtx3080ti");
    CHECK(contract_problem(j) == "");  // the file on host_b
    CHECK(j["reference_sha256"] == ref_sha[name]);
    // The sampling host's own verified copy of the reference: host_b's came over the link.
    const std::string host = j["pool"] == "xtx" ? "host_b" : "host_a";
    on_b += host == "host_b" ? 1 : 0;
    if (j["seconds"] == 10)
      CHECK(j["pool"] == "xtx");
    CHECK(vidline::sha256_file_hex(dir.path() + "/" + host + "/inputs/" + ref_sha[name])
          == ref_sha[name]);
    const std::string file = std::filesystem::path(j["output"].get<std::string>()).filename();
    CHECK(file == name + ".simvideo");
    const std::string got = read_file(out + "/" + file);
    CHECK(got == contract::video_file(j["latent_sha256"].get<std::string>(), j["seed"],
                                      j["width"], j["height"], j["seconds"]));
    REQUIRE(index.count(name) == 1);
    CHECK(index[name]["output_sha256"] == vidline::to_hex(vidline::sha256_of(got)));
    CHECK(index[name]["output_sha256"] == j["output_sha256"]);
    CHECK(index[name]["reference_sha256"] == ref_sha[name]);
    CHECK(index[name]["decoder"] == "rtx3080ti");
  }
  CHECK(on_b >= 2);  // both 10 s shots crossed
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
