// kill -9 of a node in the middle of a chain of shots (two real node processes on loopback,
// sim line): the coordinator's host (its journal, the inputs it made) or the decoders' host
// (the videos the next links take their frames from) is killed once the second of four
// links has its video, and started again. The chain finishes; every link's input is its
// parent's last frame per the sim contract, byte for byte; no link is lost, none made or
// indexed twice.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>

#include "common/sha256.hpp"
#include "config/config.hpp"
#include "config/shot_graph.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;
using testing_support::temp_dir;

namespace {

const char* links[] = {"link1", "link2", "link3", "link4"};

/// Four 1 s links of one sequence, each taking the last frame of the one before.
std::string chain_list() {
  std::string list;
  for (int k = 0; k < 4; ++k) {
    json s = {{"prompt", std::string("one long take, ") + links[k]}, {"width", 416},
              {"height", 736}, {"seconds", 1}, {"seed", 40 + k}, {"name", links[k]},
              {"sequence", "take"}};
    if (k > 0)
      s["inputs"] = {{"reference", {{"from", links[k - 1]}, {"frame", "last"}}}};
    list += s.dump() + "\n";
  }
  return list;
}

std::map<std::string, json> by_shot(const json& status) {
  std::map<std::string, json> out;
  for (auto& j : status["jobs"])
    out[j["shot"].get<std::string>()] = j;
  return out;
}

} // namespace

TEST_CASE("kill -9 of a node mid-chain: the chain finishes, each link from its parent's frame") {
  for (const std::string victim : {"host_a", "host_b"}) {
    DYNAMIC_SECTION("killed: " << victim) {
      temp_dir dir("vl-chain-kill");
      auto config = testing_support::write_reference_config(dir.path(), 0.01);
      auto cluster = config::load(config);
      std::map<std::string, std::unique_ptr<testing_support::process>> nodes;
      for (const char* h : {"host_a", "host_b"})
        nodes[h] = testing_support::start_node(dir.path(), config, h);
      nodes::verbs::coordinator_client cl(cluster);
      REQUIRE(testing_support::coordinator_answers(cl, 30));
      REQUIRE(testing_support::line_reported(cl, 30));
      std::ofstream(dir.path() + "/chain.jsonl") << chain_list();
      const auto run_id = testing_support::submit_shot_list(
        dir.path(), config, "four_four_xtx_plus_one", dir.path() + "/chain.jsonl");

      // The second link has its video, the third and fourth not yet: kill -9, start again.
      auto mid = testing_support::wait_status(cl, run_id, 120, [](const json& s) {
        auto j = by_shot(s);
        return j["link2"]["state"] == "succeeded" || s["state"] != "running";
      });
      REQUIRE(mid["state"] == "running");
      INFO("at the kill: link3 " << by_shot(mid)["link3"]["state"] << ", link4 "
                                 << by_shot(mid)["link4"]["state"]);
      REQUIRE(by_shot(mid)["link4"]["state"] != "succeeded");
      nodes[victim]->signal(SIGKILL);
      nodes[victim]->wait(10);
      nodes[victim] = testing_support::start_node(dir.path(), config, victim);
      REQUIRE(testing_support::coordinator_answers(cl, 30));

      auto st = testing_support::wait_status(cl, run_id, 180,
                                             [](const json& s) { return s["state"] != "running"; });
      INFO(st.dump().substr(0, 4000));
      REQUIRE(st["state"] == "succeeded");
      auto jobs = by_shot(st);
      REQUIRE(jobs.size() == 4);
      for (auto& [shot, j] : jobs) {
        CHECK(j["state"] == "succeeded");
        CHECK(j["done_twice"] == 0);
      }
      for (int k = 1; k < 4; ++k) {
        auto& child = jobs[links[k]];
        auto& parent = jobs[links[k - 1]];
        const auto frame = config::graph::sim_frame(parent["output_sha256"], 24);
        CHECK(child["inputs"]["reference"] == to_hex(sha256_of(frame)));
        CHECK(child["reference_sha256"] == child["inputs"]["reference"]);
        CHECK(child["times"]["sample_start_s"].get<double>()
              >= parent["times"]["decode_end_s"].get<double>());
      }
      CHECK(st["summary"]["succeeded"] == 4);
      CHECK(st["summary"]["done_twice"] == 0);
      // Each video indexed once on the decoders' host.
      std::vector<std::string> repeated;
      auto index = testing_support::read_index(
        dir.path() + "/host_b/outputs/" + run_id + "/index.jsonl", repeated);
      CHECK(repeated.empty());
      for (auto* l : links)
        CHECK(index.count(l) == 1);
      for (auto& [h, n] : nodes)
        n->signal(SIGTERM);
      for (auto& [h, n] : nodes)
        n->wait(30);
    }
  }
}
