// A shot list on two real node processes (loopback, sim backend): a bad list is refused
// whole with its line and field and nothing is submitted; a mixed list with references runs
// to the end, every output matches the sim contract, its name and the run's index file. The
// references travel by digest: moved away after `vidline run` uploaded them, they still reach
// the sampling hosts (host_b pulls its copy from the coordinator's host_a) and are verified.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/contract.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;
using testing_support::process;
using testing_support::temp_dir;

TEST_CASE("a mixed shot list with references runs to the end, a bad list is refused whole") {
  temp_dir dir("vl-shots-line");
  auto config = testing_support::write_reference_config(dir.path(), 0.005);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "host_a");
  auto b = testing_support::start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  // Six shots, three sizes (736x1280x10 fits only eight and xtx), each its own reference.
  struct shot { std::string name; uint32_t w, h, s; uint64_t seed; uint32_t takes; };
  const std::vector<shot> shots = {{"open", 736, 1280, 10, 11, 1}, {"wide", 416, 736, 5, 22, 2},
                                   {"close", 736, 1280, 5, 33, 1}, {"end", 416, 736, 5, 44, 1}};
  std::string list;
  std::map<std::string, std::string> ref_sha, prompt_sha;
  for (auto& s : shots) {
    const std::string ref = "refs/" + s.name + ".png";
    std::filesystem::create_directories(dir.path() + "/refs");
    const std::string bytes = "image of " + s.name;
    std::ofstream(dir.path() + "/" + ref) << bytes;
    const std::string prompt = "shot " + s.name + ", slow pan";
    ref_sha[s.name] = to_hex(sha256_of(bytes));
    prompt_sha[s.name] = to_hex(sha256_of(prompt));
    list += json{{"prompt", prompt}, {"width", s.w}, {"height", s.h}, {"seconds", s.s},
                 {"seed", s.seed}, {"takes", s.takes}, {"name", s.name}, {"reference", ref}}
              .dump() + "\n";
  }
  std::ofstream(dir.path() + "/good.jsonl") << list;
  // The same list with one bad line: a reference that does not exist.
  std::ofstream(dir.path() + "/bad.jsonl")
    << list << R"({"prompt": "x", "width": 416, "height": 736, "seconds": 5, "seed": 1, "reference": "refs/missing.png"})"
    << "\n";

  {
    process bad({VIDLINE_BINARY, "run", "--config", config, "--mode", "four_four_xtx_plus_one",
                 "--jobs", dir.path() + "/bad.jsonl"},
                dir.path() + "/bad.out");
    CHECK(bad.wait(30) == 2);
    INFO(bad.err());
    CHECK(bad.err().find("bad.jsonl:5: reference: ") != std::string::npos);
    CHECK(bad.err().find("nothing was submitted") != std::string::npos);
    // A list a mode cannot hold: refused by line, naming the pools.
    process big({VIDLINE_BINARY, "run", "--config", config, "--mode", "four_four_plus_one",
                 "--jobs", dir.path() + "/good.jsonl"},
                dir.path() + "/big.out");
    CHECK(big.wait(30) == 2);
    CHECK(big.err().find("good.jsonl:1: size: no pool of mode four_four_plus_one") != std::string::npos);
    // An upload the coordinator's node cannot store (its inputs folder is a file here):
    // refused by line and field, nothing submitted.
    std::ofstream(dir.path() + "/host_a/inputs") << "in the way";
    process blocked({VIDLINE_BINARY, "run", "--config", config, "--mode",
                     "four_four_xtx_plus_one", "--jobs", dir.path() + "/good.jsonl"},
                    dir.path() + "/blocked.out");
    CHECK(blocked.wait(60) == 2);
    INFO(blocked.err());
    CHECK(blocked.err().find("good.jsonl:1: reference: ") != std::string::npos);
    CHECK(blocked.err().find("was not uploaded to the coordinator") != std::string::npos);
    CHECK(blocked.err().find("nothing was submitted") != std::string::npos);
    std::filesystem::remove(dir.path() + "/host_a/inputs");
    // Nothing reached the coordinator.
    bool no_runs = false;
    try {
      no_runs = !cl.status("", 2000).has_value();
    } catch (const std::exception& e) {
      no_runs = std::string(e.what()).find("no runs") != std::string::npos;
    }
    CHECK(no_runs);
  }

  // References travel: `vidline run` uploads each image to the coordinator's node before it
  // submits; once it has, the images are moved away where no node can read them, and every
  // job still samples from the copies the nodes hold by digest (host_b pulls its own).
  const std::string run_id = testing_support::submit_shot_list(
      dir.path(), config, "four_four_xtx_plus_one", dir.path() + "/good.jsonl");
  std::filesystem::rename(dir.path() + "/refs", dir.path() + "/moved-away");
  for (auto& [name, sha] : ref_sha)
    CHECK(sha256_file_hex(dir.path() + "/host_a/inputs/" + sha) == sha);
  process run({VIDLINE_BINARY, "wait", run_id, "--config", config, "--json"},
              dir.path() + "/run.out");
  int code = run.wait(240);
  INFO(run.err());
  REQUIRE(code == 0);
  auto st = json::parse(run.out());
  REQUIRE(st["run_id"] == run_id);
  CHECK(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 5);

  // The index lines of every decoder host, by name.
  std::map<std::string, json> index;
  for (const char* host : {"host_a", "host_b"}) {
    std::ifstream in(dir.path() + "/" + host + "/outputs/" + run_id + "/index.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = json::parse(line);
      CHECK(index.count(j["name"]) == 0);  // one line per video
      index[j["name"].get<std::string>()] = j;
    }
  }
  CHECK(index.size() == 5);
  for (auto& j : st["jobs"]) {
    INFO(j.dump());
    CHECK(testing_support::contract_problem(j) == "");
    const std::string name = j["name"].get<std::string>();
    const std::string shot = name.substr(0, name.find("-take-"));
    const std::string out = j["output"].get<std::string>();
    CHECK(std::filesystem::path(out).filename().string() == name + ".simvideo");
    CHECK(j["reference_sha256"] == ref_sha[shot]);
    if (j["seconds"] == 10)
      CHECK(j["pool"] == "xtx");  // the only pool of the mode that holds 736x1280x10
    // The sampling host's own verified copy of the reference (host_b pulled it from host_a).
    const std::string host = j["pool"] == "xtx" ? "host_b" : "host_a";
    CHECK(sha256_file_hex(dir.path() + "/" + host + "/inputs/" + ref_sha[shot]) == ref_sha[shot]);
    REQUIRE(index.count(name) == 1);
    auto& l = index[name];
    CHECK(l["seed"] == j["seed"]);
    // The sim names the model that sampled it: "sim:<model key>", in the status and the index.
    CHECK(j["model_identity"] == "sim:" + j["model"].get<std::string>());
    CHECK(l["model_identity"] == j["model_identity"]);
    CHECK(l["width"] == j["width"]);
    CHECK(l["height"] == j["height"]);
    CHECK(l["seconds"] == j["seconds"]);
    CHECK(l["pool"] == j["pool"]);
    CHECK(l["decoder"] == j["decoder"]);
    CHECK(l["reference_sha256"] == ref_sha[shot]);
    CHECK(l["prompt_sha256"] == prompt_sha[shot]);
    CHECK(l["output_sha256"] == sha256_file_hex(out));
    CHECK(l["output_sha256"] == j["output_sha256"]);
    CHECK(l["timings"]["sampling_s"].get<double>() > 0);
  }
  CHECK(index.count("wide-take-1") == 1);
  CHECK(index.count("wide-take-2") == 1);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
