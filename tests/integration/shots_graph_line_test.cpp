// Shots that follow shots on the sim line (two real node processes on loopback): a chain of
// segments, each taking the last frame of the one before, runs link by link and every link's
// input is its parent's last frame per the sim contract, byte for byte; the segments, one
// sequence, are joined and collected; the same list again reuses every output, an edit of
// one segment renders it and what follows, --rerender renders all; a bad graph is refused
// naming its lines before anything is submitted; a fresh line reuses the videos a collection
// folder holds.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/sha256.hpp"
#include "config/config.hpp"
#include "config/shot_graph.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;
using testing_support::process;
using testing_support::temp_dir;

namespace {

/// A chain of three 1 s segments of one sequence; `seed2` is the middle one's seed.
std::string chain_list(uint64_t seed2) {
  std::string list;
  const char* names[] = {"seg1", "seg2", "seg3"};
  for (int k = 0; k < 3; ++k) {
    json s = {{"prompt", std::string("a long take, part ") + names[k]}, {"width", 416},
              {"height", 736}, {"seconds", 1}, {"seed", k == 1 ? seed2 : uint64_t(10 + k)},
              {"name", names[k]}, {"sequence", "take"}};
    if (k > 0)
      s["inputs"] = {{"reference", {{"from", names[k - 1]}, {"frame", "last"}}}};
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

/// When a job's first stage began (run-clock seconds from the run's submission).
double j_start(const json& j) { return j["times"]["sample_start_s"].get<double>(); }

} // namespace

TEST_CASE("a chain of segments runs on the sim line, is joined, reused and re-rendered") {
  temp_dir dir("vl-graph-line");
  auto config = testing_support::write_reference_config(dir.path(), 0.002);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "host_a");
  auto b = testing_support::start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  const std::string mode = "four_four_xtx_plus_one";

  // A cycle and an unknown name: refused whole, naming the lines, nothing submitted.
  std::ofstream(dir.path() + "/cycle.jsonl")
    << R"({"prompt": "x", "width": 416, "height": 736, "seconds": 1, "seed": 1, "name": "a", "inputs": {"reference": {"from": "b"}}})"
    << "\n"
    << R"({"prompt": "y", "width": 416, "height": 736, "seconds": 1, "seed": 2, "name": "b", "inputs": {"reference": {"from": "a", "frame": 24}}})"
    << "\n";
  process cycle({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs",
                 dir.path() + "/cycle.jsonl"},
                dir.path() + "/cycle.out");
  CHECK(cycle.wait(30) == 2);
  INFO(cycle.err());
  CHECK(cycle.err().find("cycle.jsonl:1: inputs: the shots take from each other in a cycle: "
                         + dir.path() + "/cycle.jsonl:1 takes from " + dir.path()
                         + "/cycle.jsonl:2 takes from " + dir.path() + "/cycle.jsonl:1")
        != std::string::npos);
  std::ofstream(dir.path() + "/frame.jsonl")
    << R"({"prompt": "x", "width": 416, "height": 736, "seconds": 1, "seed": 1, "name": "a"})"
    << "\n"
    << R"({"prompt": "y", "width": 416, "height": 736, "seconds": 1, "seed": 2, "name": "b", "inputs": {"reference": {"from": "a", "frame": 25}}})"
    << "\n";
  process frame({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs",
                 dir.path() + "/frame.jsonl"},
                dir.path() + "/frame.out");
  CHECK(frame.wait(30) == 2);
  CHECK(frame.err().find("frame.jsonl:2: inputs.reference: frame: '25' is not") != std::string::npos);
  // No run was submitted: the coordinator has none.
  CHECK_THROWS_WITH(cl.status("", 2000), Catch::Contains("no runs yet"));

  // The chain, collected: each link after the one before, its input the last frame.
  std::ofstream(dir.path() + "/chain.jsonl") << chain_list(11);
  const std::string out = dir.path() + "/out";
  process run({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs",
               dir.path() + "/chain.jsonl", "--collect", out, "--json"},
              dir.path() + "/run.out");
  REQUIRE(run.wait(120) == 0);
  const std::string run_id = json::parse(run.out())["run_id"].get<std::string>();
  auto st = *cl.status(run_id, 5000);
  auto jobs = by_shot(st);
  for (auto& [shot, j] : jobs)
    CHECK(j["state"] == "succeeded");
  for (auto [child, parent] : {std::pair{"seg2", "seg1"}, std::pair{"seg3", "seg2"}}) {
    const auto frame = config::graph::sim_frame(jobs[parent]["output_sha256"], 24);
    auto& from = jobs[child]["takes_from"].at(0);
    CHECK(from["input"] == "reference");
    CHECK(from["from"] == parent);
    const std::string sha = jobs[child]["inputs"]["reference"].get<std::string>();
    CHECK(sha == to_hex(sha256_of(frame)));
    CHECK(jobs[child]["reference_sha256"] == sha);  // the sampling host pulled and checked it
    // The stored input, byte for byte (on the coordinator's host, by its SHA-256).
    CHECK(testing_support::read_file(dir.path() + "/host_a/inputs/" + sha) == frame);
    // A link started only after its parent's video was made.
    CHECK(j_start(jobs[child]) >= jobs[parent]["times"]["decode_end_s"].get<double>());
  }
  // Collected: the three segments and the joined sequence, indexed with its parts.
  std::vector<std::string> repeated;
  auto index = testing_support::read_index(out + "/index.jsonl", repeated);
  REQUIRE(index.count("take"));
  CHECK(index["take"]["sequence"] == true);
  std::string expect = "vidline-sim-sequence 1\n";
  for (auto* s : {"seg1", "seg2", "seg3"}) {
    expect += "part " + jobs[s]["output_sha256"].get<std::string>() + "\n";
    CHECK(index[s]["key"] == jobs[s]["key"]);
  }
  CHECK(testing_support::read_file(out + "/take.simvideo") == expect);
  CHECK(index["take"]["output_sha256"] == to_hex(sha256_of(expect)));
  CHECK(index["take"]["parts"].size() == 3);

  // The same list again: every job reused, no GPU time.
  auto again = testing_support::submit_shot_list(dir.path(), config, mode, dir.path() + "/chain.jsonl");
  st = testing_support::wait_status(cl, again, 60, [](const json& s) { return s["state"] != "running"; });
  for (auto& [shot, j] : by_shot(st)) {
    CHECK(j["state"] == "reused");
    CHECK(j["attempts"] == 0);
  }
  CHECK(st["summary"]["reused"] == 3);
  // seg2 edited (another seed): seg1 reused, seg2 and seg3 (its input changed) rendered.
  std::ofstream(dir.path() + "/edit.jsonl") << chain_list(99);
  auto edit = testing_support::submit_shot_list(dir.path(), config, mode, dir.path() + "/edit.jsonl");
  st = testing_support::wait_status(cl, edit, 60, [](const json& s) { return s["state"] != "running"; });
  auto e = by_shot(st);
  CHECK(e["seg1"]["state"] == "reused");
  CHECK(e["seg2"]["state"] == "succeeded");
  CHECK(e["seg3"]["state"] == "succeeded");
  CHECK(e["seg3"]["key"] != jobs["seg3"]["key"]);
  // --rerender: all three rendered.
  process forced({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs",
                  dir.path() + "/chain.jsonl", "--rerender", "--json"},
                 dir.path() + "/forced.out");
  REQUIRE(forced.wait(120) == 0);
  st = *cl.status(json::parse(forced.out())["run_id"].get<std::string>(), 5000);
  for (auto& [shot, j] : by_shot(st))
    CHECK(j["state"] == "succeeded");
}

TEST_CASE("a fresh line reuses the videos its collection folder holds, an altered one renders") {
  temp_dir dir("vl-graph-collected");
  std::ofstream(dir.path() + "/chain.jsonl") << chain_list(11);
  const std::string out = dir.path() + "/out";
  const std::string mode = "four_four_xtx_plus_one";
  auto run_list = [&](const std::string& config, const std::string& tag) {
    process run({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs",
                 dir.path() + "/chain.jsonl", "--collect", out, "--json"},
                dir.path() + "/" + tag + ".out");
    const int rc = run.wait(120);
    INFO(run.err());
    REQUIRE(rc >= 0);
    return std::pair{rc, run.err()};
  };
  // A line renders the chain into the folder, then goes away with everything it held.
  std::map<std::string, json> first;
  {
    temp_dir one("vl-graph-collected-1");
    auto config = testing_support::write_reference_config(one.path(), 0.002);
    auto cluster = config::load(config);
    auto a = testing_support::start_node(one.path(), config, "host_a");
    auto b = testing_support::start_node(one.path(), config, "host_b");
    nodes::verbs::coordinator_client cl(cluster);
    REQUIRE(testing_support::coordinator_answers(cl, 30));
    REQUIRE(run_list(config, "first").first == 0);
    first = by_shot(*cl.status("", 5000));
  }
  std::vector<std::string> repeated;
  REQUIRE(testing_support::read_index(out + "/index.jsonl", repeated).size() == 4);

  // A fresh line (another data directory, its journal empty): nothing renders.
  temp_dir two("vl-graph-collected-2");
  auto config = testing_support::write_reference_config(two.path(), 0.002);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(two.path(), config, "host_a");
  auto b = testing_support::start_node(two.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  auto [rc, err] = run_list(config, "again");
  CHECK(rc == 0);
  auto st = *cl.status("", 5000);
  for (auto& [shot, j] : by_shot(st)) {
    INFO(shot);
    CHECK(j["state"] == "reused");
    CHECK(j["reused_from"] == "collection");
    CHECK(j["attempts"] == 0);
    CHECK(j["pool"].is_null());
    CHECK(j["output_sha256"] == first[shot]["output_sha256"]);
    CHECK(j["key"] == first[shot]["key"]);
  }
  CHECK(st["summary"]["reused"] == 3);
  // Every video and the sequence were there already: the index gained no line.
  repeated.clear();
  CHECK(testing_support::read_index(out + "/index.jsonl", repeated).size() == 4);
  CHECK(repeated.empty());
  CHECK(err.find("error") == std::string::npos);

  // seg3's file altered: it is not offered, so it renders (and the altered file is not
  // overwritten: the collection refuses it, exit 11); seg1 and seg2 are reused.
  std::ofstream(out + "/seg3.simvideo", std::ios::app) << "edited by hand\n";
  std::tie(rc, err) = run_list(config, "altered");
  CHECK(rc == 11);
  CHECK(err.find("seg3.simvideo is not the video its index line names") != std::string::npos);
  st = *cl.status("", 5000);
  auto jobs = by_shot(st);
  CHECK(jobs["seg1"]["state"] == "reused");
  CHECK(jobs["seg2"]["state"] == "reused");
  CHECK(jobs["seg3"]["state"] == "succeeded");
  CHECK(jobs["seg3"]["attempts"] == 1);
  CHECK(jobs["seg3"]["key"] == first["seg3"]["key"]);
}

TEST_CASE("a latent handed over on the sim line: each link samples from its parent's latent") {
  temp_dir dir("vl-graph-latent");
  auto config = testing_support::write_reference_config(dir.path(), 0.002);
  // Two workflows of one model: t2v, and extend, which continues from another shot's latent.
  auto cfg = json::parse(testing_support::read_file(config));
  cfg["backends"]["sim"]["workflows"] = json::parse(R"([
    {"name": "t2v", "model": "sim", "default": true, "inputs": {"reference": {"required": false}}},
    {"name": "extend", "model": "sim", "inputs": {"init_latent": {"required": true, "latent": true}}}
  ])");
  std::ofstream(config) << cfg.dump(2);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "host_a");
  auto b = testing_support::start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  const std::string mode = "four_four_xtx_plus_one";

  // Where the workflow does not continue from a latent: refused naming the line.
  std::ofstream(dir.path() + "/bad.jsonl")
    << R"({"prompt": "x", "width": 416, "height": 736, "seconds": 1, "seed": 1, "name": "a"})" << "\n"
    << R"({"prompt": "y", "width": 416, "height": 736, "seconds": 1, "seed": 2, "name": "b", "inputs": {"reference": {"from": "a", "latent": true}}})" << "\n";
  process bad({VIDLINE_BINARY, "run", "--config", config, "--mode", mode, "--jobs",
               dir.path() + "/bad.jsonl"},
              dir.path() + "/bad.out");
  CHECK(bad.wait(30) == 2);
  CHECK(bad.err().find("bad.jsonl:2: inputs.reference: latent: workflow 't2v' does not continue "
                       "from a latent here")
        != std::string::npos);

  // A chain of three: l2 continues from l1's latent, l3 from l2's.
  std::string list;
  for (int k = 1; k <= 3; ++k) {
    json s = {{"prompt", "one long take"}, {"width", 416}, {"height", 736}, {"seconds", 1},
              {"seed", 500 + k}, {"name", "l" + std::to_string(k)}};
    if (k > 1) {
      s["workflow"] = "extend";
      s["inputs"] = {{"init_latent", {{"from", "l" + std::to_string(k - 1)}, {"latent", true}}}};
    }
    list += s.dump() + "\n";
  }
  std::ofstream(dir.path() + "/latent.jsonl") << list;
  auto run_id = testing_support::submit_shot_list(dir.path(), config, mode, dir.path() + "/latent.jsonl");
  auto st = testing_support::wait_status(cl, run_id, 90, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  auto jobs = by_shot(st);
  for (auto& [shot, j] : jobs) {
    INFO(shot);
    // The contract's latent: a link's input.init_latent line carries its parent's latent digest.
    CHECK(testing_support::contract_problem(j) == "");
  }
  for (auto [child, parent] : {std::pair{"l2", "l1"}, std::pair{"l3", "l2"}}) {
    INFO(child << " continues from " << parent);
    const std::string latent = jobs[parent]["latent_sha256"].get<std::string>();
    CHECK(jobs[child]["inputs"]["init_latent"] == latent);
    CHECK(jobs[child]["takes_from"].at(0)["from"] == parent);
    // Handed over verified: the coordinator's host keeps it as an input, byte for byte the
    // parent's latent (the sim contract's, recomputed from the parent's job alone).
    const std::string kept = testing_support::read_file(dir.path() + "/host_a/inputs/" + latent);
    CHECK(kept.size() == jobs[parent]["latent_bytes"].get<uint64_t>());
    CHECK(to_hex(sha256_of(kept)) == latent);
    CHECK(j_start(jobs[child]) >= jobs[parent]["times"]["decode_end_s"].get<double>());
  }
  // The same list again: the sources render (only a render makes a latent to hand over);
  // l3, given the same latent, has the same key and is reused.
  auto again = testing_support::submit_shot_list(dir.path(), config, mode, dir.path() + "/latent.jsonl");
  st = testing_support::wait_status(cl, again, 90, [](const json& s) { return s["state"] != "running"; });
  auto second = by_shot(st);
  CHECK(second["l1"]["state"] == "succeeded");
  CHECK(second["l2"]["state"] == "succeeded");
  CHECK(second["l3"]["state"] == "reused");
  CHECK(second["l3"]["key"] == jobs["l3"]["key"]);
  CHECK(second["l2"]["inputs"]["init_latent"] == jobs["l2"]["inputs"]["init_latent"]);
}
