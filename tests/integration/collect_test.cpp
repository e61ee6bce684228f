// Outputs collected (`vidline run --collect DIR`, docs/shots.md) on two real node processes
// (loopback, sim backend, CURVE and bulk channels as a line runs): every collected video
// reads as the sim contract says, hashes as the run's status and index say, and is indexed
// once; a different file at a target name is refused, not overwritten; a kill of the
// collecting client and of the coordinator mid-list, then `vidline resume --collect`,
// collects each video once.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <set>

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

/// A mixed shot list (three sizes, takes, references) of `rounds` x 4 shots; its path.
std::string write_list(const std::string& dir, int rounds) {
  struct shot { std::string name; uint32_t w, h, s; uint32_t takes; };
  const std::vector<shot> shots = {{"open", 736, 1280, 10, 1}, {"wide", 416, 736, 5, 2},
                                   {"close", 736, 1280, 5, 1}, {"end", 416, 736, 5, 1}};
  std::filesystem::create_directories(dir + "/refs");
  std::string list;
  for (int r = 0; r < rounds; ++r)
    for (auto& s : shots) {
      const std::string name = s.name + (r == 0 ? "" : std::to_string(r));
      std::ofstream(dir + "/refs/" + name + ".png") << "image of " << name;
      list += json{{"prompt", "shot " + name}, {"width", s.w}, {"height", s.h},
                   {"seconds", s.s}, {"seed", 100 + 10 * r + s.w % 7}, {"takes", s.takes},
                   {"name", name}, {"reference", "refs/" + name + ".png"}}
                .dump() + "\n";
    }
  std::ofstream(dir + "/list.jsonl") << list;
  return dir + "/list.jsonl";
}

/// The index lines of a collect directory, by name; fails on a name indexed twice.
std::map<std::string, json> read_index(const std::string& path) {
  std::vector<std::string> twice;
  auto out = testing_support::read_index(path, twice);
  CHECK(twice.empty());
  return out;
}

/// Every job of `st` is collected in `dir` as the contract, the status and the index say.
void check_collected(const json& st, const std::string& dir) {
  auto index = read_index(dir + "/index.jsonl");
  CHECK(index.size() == st["jobs"].size());
  for (auto& j : st["jobs"]) {
    INFO(j.dump());
    REQUIRE(testing_support::contract_problem(j) == "");
    const std::string file = std::filesystem::path(j["output"].get<std::string>()).filename();
    const std::string name = j["name"].get<std::string>();
    CHECK(file == name + ".simvideo");
    const std::string got = read_file(dir + "/" + file);
    CHECK(got == contract::video_file(j["latent_sha256"].get<std::string>(), j["seed"],
                                      j["width"], j["height"], j["seconds"]));
    CHECK(to_hex(sha256_of(got)) == j["output_sha256"]);
    REQUIRE(index.count(name) == 1);
    auto& l = index[name];
    CHECK(l["output_sha256"] == j["output_sha256"]);
    CHECK(l["bytes"] == got.size());
    CHECK(l["run_id"] == st["run_id"]);
    for (const char* k : {"index", "seed", "width", "height", "seconds", "pool", "decoder",
                          "reference_sha256"})
      CHECK(l[k] == j[k]);
    CHECK(l["prompt_sha256"] == to_hex(sha256_of("shot " + name.substr(0, name.find("-take-")))));
    CHECK(l["timings"]["sampling_s"].get<double>() > 0);
    CHECK(l["timings"]["decode_s"].get<double>() > 0);
    CHECK(!std::filesystem::exists(dir + "/" + file + ".part"));
  }
}

} // namespace

TEST_CASE("a shot list's videos are collected and indexed, another file at a name is refused") {
  temp_dir dir("vl-collect");
  auto config = testing_support::write_reference_config(dir.path(), 0.005,
                                                         {{"transfer_timeout_ms", 1000}});
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "host_a");
  auto b = testing_support::start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  const auto list = write_list(dir.path(), 1);
  const std::string out = dir.path() + "/collected";
  std::filesystem::create_directories(out);
  std::ofstream(out + "/end.simvideo") << "an older cut, not this run's";

  process run({VIDLINE_BINARY, "run", "--config", config, "--mode", "four_four_xtx_plus_one",
               "--jobs", list, "--json", "--collect", out},
              dir.path() + "/run.out");
  const int code = run.wait(240);
  INFO(run.err());
  CHECK(code == 11);  // not_collected: one refused
  CHECK(run.err().find("(end.simvideo): refused: " + out + "/end.simvideo exists with other bytes")
        != std::string::npos);
  CHECK(run.err().find("collected 4 video(s) into " + out + ", 1 refused") != std::string::npos);
  CHECK(read_file(out + "/end.simvideo") == "an older cut, not this run's");  // untouched
  auto st = json::parse(run.out());
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 5);
  CHECK(read_index(out + "/index.jsonl").size() == 4);
  const std::string run_id = st["run_id"];

  // Moved away, the video is collected by resume; a leftover part file is started over.
  std::filesystem::remove(out + "/end.simvideo");
  std::ofstream(out + "/end.simvideo.part") << "half of something";
  process again({VIDLINE_BINARY, "resume", run_id, "--config", config, "--collect", out},
                dir.path() + "/resume.out");
  CHECK(again.wait(60) == 0);
  INFO(again.err());
  CHECK(again.out().find("collected 1 video(s) into " + out + ", 4 already there") != std::string::npos);
  check_collected(st, out);

  // Collecting again changes nothing and indexes nothing twice.
  const std::string index_before = read_file(out + "/index.jsonl");
  process twice({VIDLINE_BINARY, "wait", run_id, "--config", config, "--collect", out},
                dir.path() + "/twice.out");
  CHECK(twice.wait(60) == 0);
  CHECK(twice.out().find("collected 0 video(s) into " + out + ", 5 already there") != std::string::npos);
  CHECK(read_file(out + "/index.jsonl") == index_before);

  // The decoder host down: its videos are named as not collected (exit 11), nothing
  // partial is left, and a silent host costs one timeout per pass, not one per video.
  b->signal(SIGTERM);
  CHECK(b->wait(20) == 0);
  int on_b = 0;
  for (auto& j : st["jobs"])
    on_b += cluster.find_decoder(j["decoder"])->host == "host_b" ? 1 : 0;
  const std::string out2 = dir.path() + "/collected2";
  const auto before = std::chrono::steady_clock::now();
  process down({VIDLINE_BINARY, "wait", run_id, "--config", config, "--collect", out2},
               dir.path() + "/down.out");
  REQUIRE(on_b == 5);  // the mode's one decoder, rtx3080ti, is on host_b
  CHECK(down.wait(120) == 11);
  INFO(down.err());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  CHECK(took < 30);  // two passes, one silence of 6 x 1 s each
  CHECK(down.out().find("collected " + std::to_string(5 - on_b) + " video(s)") != std::string::npos);
  CHECK(down.err().find("not collected: no answer from host host_b") != std::string::npos);
  CHECK(down.out().find("5 not collected") != std::string::npos);
  CHECK(read_index(out2 + "/index.jsonl").empty());
  CHECK(std::distance(std::filesystem::directory_iterator(out2), {}) == 0);

  a->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
}

TEST_CASE("a kill of the collecting client and the coordinator mid-list, then resume collects each once") {
  temp_dir dir("vl-collect-kill");
  auto config = testing_support::write_reference_config(dir.path(), 0.02);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "host_a");
  auto b = testing_support::start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  const auto list = write_list(dir.path(), 3);  // 15 jobs
  const std::string out = dir.path() + "/collected";

  process run({VIDLINE_BINARY, "run", "--config", config, "--mode", "four_four_xtx_plus_one",
               "--jobs", list, "--json", "--collect", out},
              dir.path() + "/run.out");
  // Mid-list: the client has collected a video as it finished, the run goes on.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline
         && read_file(out + "/index.jsonl").find('\n') == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling pace
  REQUIRE(read_file(out + "/index.jsonl").find('\n') != std::string::npos);
  json mid = testing_support::wait_status(cl, "", 10, [](const json&) { return true; });
  REQUIRE(mid["summary"]["succeeded"].get<int>() < 15);
  const std::string run_id = mid["run_id"];
  run.signal(SIGKILL);
  CHECK(run.wait(10) == 128 + SIGKILL);
  a->signal(SIGKILL);
  REQUIRE(a->wait(10) == 128 + SIGKILL);
  a = testing_support::start_node(dir.path(), config, "host_a");
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  process resume({VIDLINE_BINARY, "resume", run_id, "--config", config, "--json", "--collect", out},
                 dir.path() + "/resume.out");
  CHECK(resume.wait(300) == 0);
  INFO(resume.err());
  // Every video once: collected now, or there already from before the kill.
  std::smatch m;
  const std::string said = resume.err();
  REQUIRE(std::regex_search(said, m, std::regex("collected ([0-9]+) video\\(s\\) into [^,]*, ([0-9]+) already there")));
  CHECK(std::stoi(m[1]) + std::stoi(m[2]) == 15);
  CHECK(std::stoi(m[2]) >= 1);
  auto st = json::parse(resume.out());
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 15);
  check_collected(st, out);

  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
