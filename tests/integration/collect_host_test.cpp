// A host that collects (`hosts[].collect_dir`, docs/shots.md "A host that collects") on two
// real node processes (loopback, sim backend, CURVE and bulk channels): a shot list submitted
// in the background, with no client following it, lands in host_a's collect_dir, every video
// as the sim contract, the status and the index say, indexed once. Stopped by kill -9 and
// started again, the node collects a video taken away once more, leaves a file with other
// bytes at a video's name alone (named in its log), and indexes nothing twice.
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
using testing_support::read_file;
using testing_support::temp_dir;

namespace {

/// Waits until `done()` holds or `seconds` pass; whether it held.
template <class Pred>
bool eventually(double seconds, Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling pace
  }
  return true;
}

} // namespace

TEST_CASE("a host with a collect_dir collects every run's videos with no client following") {
  temp_dir dir("vl-collect-host");
  auto config = testing_support::write_reference_config(dir.path(), 0.005,
                                                        {{"collect_interval_ms", 200}});
  {
    auto cfg = json::parse(read_file(config));
    cfg["hosts"][0]["collect_dir"] = dir.path() + "/nas";  // host_a; the videos decode on host_b
    std::ofstream(config) << cfg.dump(2);
  }
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "host_a");
  auto b = testing_support::start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  std::filesystem::create_directories(dir.path() + "/refs");
  std::string list;
  const std::vector<std::string> names = {"dawn", "noon", "dusk", "night"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::ofstream(dir.path() + "/refs/" + names[i] + ".png") << "image of " << names[i];
    list += json{{"prompt", "shot " + names[i]}, {"width", 416}, {"height", 736},
                 {"seconds", i == 0 ? 10 : 5}, {"seed", 500 + i}, {"name", names[i]},
                 {"reference", dir.path() + "/refs/" + names[i] + ".png"}}
              .dump() + "\n";
  }
  std::ofstream(dir.path() + "/list.jsonl") << list;
  const std::string run_id = testing_support::submit_shot_list(
      dir.path(), config, "four_four_xtx_plus_one", dir.path() + "/list.jsonl");
  auto st = testing_support::wait_status(cl, run_id, 180, [](const json& s) {
    return s.value("state", "") == "succeeded";
  });
  REQUIRE(st.value("state", "") == "succeeded");
  REQUIRE(st["jobs"].size() == 4);

  const std::string out = dir.path() + "/nas/" + run_id;
  const std::string index_file = out + "/index.jsonl";
  auto index_lines = [&] {
    std::ifstream in(index_file);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  REQUIRE(eventually(60, [&] { return index_lines() == 4; }));
  auto check_all = [&] {
    std::vector<std::string> twice;
    auto index = testing_support::read_index(index_file, twice);
    CHECK(twice.empty());
    CHECK(index.size() == 4);
    for (auto& j : st["jobs"]) {
      INFO(j.dump());
      REQUIRE(testing_support::contract_problem(j) == "");
      const std::string name = j["name"];
      const std::string file = name + ".simvideo";
      CHECK(std::filesystem::path(j["output"].get<std::string>()).filename() == file);
      const std::string got = read_file(out + "/" + file);
      CHECK(got == contract::video_file(j["latent_sha256"].get<std::string>(), j["seed"],
                                        j["width"], j["height"], j["seconds"]));
      REQUIRE(index.count(name) == 1);
      CHECK(index[name]["output_sha256"] == to_hex(sha256_of(got)));
      CHECK(index[name]["output_sha256"] == j["output_sha256"]);
      CHECK(index[name]["run_id"] == run_id);
      CHECK(index[name]["decoder"] == "rtx3080ti");
      CHECK(!std::filesystem::exists(out + "/" + file + ".part"));
    }
  };
  check_all();

  // kill -9 of the collecting node; meanwhile one video is taken away and another replaced
  // by other bytes. Started again, it collects the first once more and leaves the second.
  a->signal(SIGKILL);
  a->wait(20);
  std::filesystem::remove(out + "/dawn.simvideo");
  std::ofstream(out + "/noon.simvideo") << "an editor's cut";
  a = testing_support::start_node(dir.path(), config, "host_a");
  REQUIRE(eventually(60, [&] { return std::filesystem::exists(out + "/dawn.simvideo"); }));
  const std::string log = dir.path() + "/host_a/logs/node.log";
  REQUIRE(eventually(30, [&] {
    return read_file(log).find("(noon.simvideo): refused: " + out + "/noon.simvideo exists with "
                               "other bytes") != std::string::npos;
  }));
  CHECK(read_file(out + "/noon.simvideo") == "an editor's cut");
  // Moved away, it is collected by the node's next start (a refusal is final for this one).
  std::filesystem::remove(out + "/noon.simvideo");
  a->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  a = testing_support::start_node(dir.path(), config, "host_a");
  REQUIRE(eventually(60, [&] { return std::filesystem::exists(out + "/noon.simvideo"); }));
  a->signal(SIGTERM);  // its collection ends its pass first
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
  CHECK(index_lines() == 4);  // nothing indexed twice
  check_all();
}
