// Shots that follow shots with real videos made on another host: two node processes on
// loopback, the coordinator and the pool on alpha, the decoder on beta, all three stages
// child processes of the exec backend. beta's decode program writes a real H.264 video with
// ffmpeg (another picture for every latent); alpha's coordinator pulls each video it takes a
// frame of from beta by its SHA-256 and decodes the frame with ffmpeg; alpha's sample program
// keeps a copy of the first_frame file it was given. A chain of three shots: each link's
// first_frame is, byte for byte, its parent's last frame as this test decodes it itself.
// Then the source's host down when its video is wanted, and the host serving other bytes
// under the video's digest: the dependent fails naming the host, nothing is kept.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;
using testing_support::process;
using testing_support::temp_dir;

namespace {

const std::string programs = std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/";

json gpu(const std::string& id, int index) {
  return {{"id", id}, {"model", "RTX 3080 Ti"}, {"vendor", "nvidia"}, {"memory_gib", 16},
          {"index", index}};
}

/// alpha: coordinator, encoder, pool `p`; beta: decoder `dec`. The sampler keeps each
/// first_frame it gets in <dir>/frames/<job index>.png.
std::string write_config(const std::string& dir, int transfer_timeout_ms) {
  auto ports = testing_support::free_ports(2);
  json options = {
    {"encode", {{"argv", {programs + "sim_conditioning.sh", "{prompt_file}", "{output}"}}}},
    {"sample", {{"argv", {programs + "frame_sampler.sh", dir + "/frames", "{index}",
                          "{input.first_frame}", "{seed}", "{width}", "{height}", "{seconds}",
                          "{output}"}}}},
    {"decode", {{"argv", {programs + "ffmpeg_video.sh", "{latent}", "{latent_sha256}",
                          "{frames}", "{fps}", "{width}", "{height}", "{output}"}}}},
    {"kill_grace_s", 1}};
  json cfg = {
    {"cluster", "frames_line"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]},
       {"data_dir", dir + "/alpha"}, {"gpus", {gpu("g0", 0)}}},
      {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]},
       {"data_dir", dir + "/beta"}, {"gpus", {gpu("d0", 0)}}}}},
    {"backends",
     {{"programs",
       {{"type", "exec"},
        {"options", options},
        {"workflows",
         {{{"name", "i2v"}, {"model", "frames-i2v"}, {"default", true},
           {"inputs", {{"first_frame", {{"required", false}}}}}}}}}}}},
    {"pools", {{{"name", "p"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "programs"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "beta"}, {"gpu", "d0"}, {"backend", "programs"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "programs"}}}},
    {"modes", {{"line", {{"pools", {"p"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 60}, {"decode_timeout_s", 60},
               {"transfer_timeout_ms", transfer_timeout_ms}}}};
  testing_support::add_keys(cfg, dir);
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// Three 1 s shots, l2 starting on l1's last frame and l3 on l2's.
std::string chain_list(const std::string& dir) {
  std::string list;
  for (int k = 1; k <= 3; ++k) {
    json s = {{"prompt", "a walk, part " + std::to_string(k)}, {"width", 64}, {"height", 48},
              {"seconds", 1}, {"seed", 40 + k}, {"name", "l" + std::to_string(k)}};
    if (k > 1)
      s["inputs"] = {{"first_frame", {{"from", "l" + std::to_string(k - 1)}, {"frame", "last"}}}};
    list += s.dump() + "\n";
  }
  std::ofstream(dir + "/chain.jsonl") << list;
  return dir + "/chain.jsonl";
}

std::map<std::string, json> by_shot(const json& status) {
  std::map<std::string, json> out;
  for (auto& j : status["jobs"])
    out[j["shot"].get<std::string>()] = j;
  return out;
}

/// Frame `k` of `video` as PNG, decoded here with ffmpeg as a user would.
std::string frame_png(const std::string& dir, const std::string& video, int k) {
  const std::string png = dir + "/expected-" + std::to_string(k) + "-"
                          + std::filesystem::path(video).stem().string() + ".png";
  process ff({"ffmpeg", "-v", "error", "-nostdin", "-y", "-i", video, "-vf",
              "select=eq(n\\," + std::to_string(k) + ")", "-frames:v", "1", "-f", "image2",
              "-c:v", "png", png},
             png + ".out");
  REQUIRE(ff.wait(60) == 0);
  return testing_support::read_file(png);
}

} // namespace

TEST_CASE("a chain of real videos made on another host: each link starts on its parent's last frame") {
  temp_dir dir("vl-frames");
  auto config = write_config(dir.path(), 2000);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  const std::string out = dir.path() + "/out";
  process run({VIDLINE_BINARY, "run", "--config", config, "--mode", "line", "--jobs",
               chain_list(dir.path()), "--collect", out, "--json"},
              dir.path() + "/run.out");
  REQUIRE(run.wait(180) == 0);
  const std::string run_id = json::parse(run.out())["run_id"].get<std::string>();
  auto st = *cl.status(run_id, 5000);
  INFO(st.dump(2));
  auto jobs = by_shot(st);
  REQUIRE(jobs.size() == 3);
  std::map<std::string, std::string> collected;  // shot -> its collected video
  for (auto& [shot, j] : jobs) {
    CHECK(j["state"] == "succeeded");
    // Made on beta, by beta's ffmpeg.
    const std::string made = j["output"].get<std::string>();
    CHECK(made.rfind(dir.path() + "/beta/outputs/", 0) == 0);
    collected[shot] = out + "/" + std::filesystem::path(made).filename().string();
    REQUIRE(std::filesystem::exists(collected[shot]));
    CHECK(to_hex(sha256_of(testing_support::read_file(collected[shot]))) == j["output_sha256"]);
  }
  // The head took no frame: its sampler got none.
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/frames/0.png"));
  for (auto [child, parent] : {std::pair{"l2", "l1"}, std::pair{"l3", "l2"}}) {
    INFO(child << " takes from " << parent);
    const auto& cj = jobs[child];
    const auto& pj = jobs[parent];
    // What the sampler on alpha was given, and the parent's last frame (24 of 25) decoded
    // here from the collected video: the same bytes.
    const std::string given = testing_support::read_file(
      dir.path() + "/frames/" + std::to_string(cj["index"].get<int>()) + ".png");
    const std::string expected = frame_png(dir.path(), collected[parent], 24);
    REQUIRE_FALSE(expected.empty());
    CHECK(given.size() == expected.size());
    CHECK(given == expected);
    CHECK(cj["inputs"]["first_frame"] == to_hex(sha256_of(expected)));
    // The coordinator pulled the parent's video from beta into its cache, verified.
    const std::string cached =
      dir.path() + "/alpha/inputs/videos/" + pj["output_sha256"].get<std::string>();
    REQUIRE(std::filesystem::exists(cached));
    CHECK(to_hex(sha256_of(testing_support::read_file(cached))) == pj["output_sha256"]);
    // A link started only after its parent's video was made.
    CHECK(cj["times"]["sample_start_s"].get<double>()
          >= pj["times"]["decode_end_s"].get<double>());
  }
  // The two parents' videos differ, and so do the frames taken of them.
  CHECK(jobs["l1"]["output_sha256"] != jobs["l2"]["output_sha256"]);
  CHECK(jobs["l2"]["inputs"]["first_frame"] != jobs["l3"]["inputs"]["first_frame"]);
  CHECK(testing_support::read_file(dir.path() + "/alpha/logs/node.log").find("fetched video")
        != std::string::npos);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
  CHECK(b->wait(30) == 0);
}

TEST_CASE("the source's host down when its video is wanted: the dependent fails naming it") {
  temp_dir dir("vl-frames-down");
  // 6 silent requests of 1 s: the fetch gives up after about 6 s.
  auto config = write_config(dir.path(), 500);
  auto cluster = config::load(config);
  // alpha stops right before it pulls l1's video for l2's frame (l1 succeeded, durably).
  ::setenv("VIDLINE_CRASH", "1:1:input.before_fetch", 1);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  ::unsetenv("VIDLINE_CRASH");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  const std::string run_id =
    testing_support::submit_shot_list(dir.path(), config, "line", chain_list(dir.path()));
  REQUIRE(a->wait(120) == 86);
  // beta, which holds l1's video, goes down; alpha comes back and asks for the frame again.
  b->signal(SIGKILL);
  REQUIRE(b->wait(10) == 128 + SIGKILL);
  a = testing_support::start_node(dir.path(), config, "alpha");
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  auto st = testing_support::wait_status(cl, run_id, 90,
                                         [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  CHECK(st["state"] == "failed");
  auto jobs = by_shot(st);
  CHECK(jobs["l1"]["state"] == "succeeded");
  CHECK(jobs["l2"]["state"] == "failed");
  const std::string why = jobs["l2"]["error"].get<std::string>();
  CHECK(why.find("input first_frame from shot l1 (job 0)") != std::string::npos);
  CHECK(why.find("lies on host beta and could not be fetched from it") != std::string::npos);
  CHECK(why.find("no answer from host beta") != std::string::npos);
  CHECK(jobs["l3"]["state"] == "failed");
  CHECK(jobs["l3"]["error"].get<std::string>().find("l2") != std::string::npos);
  // Nothing was kept of the video, and no sampler was given a frame.
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir.path() + "/alpha/inputs/videos", ec))
    FAIL_CHECK("left in the cache: " << e.path());
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/frames"));
  a->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
}

TEST_CASE("the source's host serves other bytes under the video's digest: nothing is kept, the dependent fails naming it") {
  temp_dir dir("vl-frames-corrupt");
  auto config = write_config(dir.path(), 2000);
  auto cluster = config::load(config);
  ::setenv("VIDLINE_CRASH", "1:1:input.before_fetch", 1);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  ::unsetenv("VIDLINE_CRASH");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  const std::string run_id =
    testing_support::submit_shot_list(dir.path(), config, "line", chain_list(dir.path()));
  REQUIRE(a->wait(120) == 86);
  // beta's copy of l1's video (the link it serves by digest) now holds other bytes; the
  // named video stays as it was.
  const std::string blobs = dir.path() + "/beta/outputs/.by-sha256";
  std::vector<std::string> served;
  for (auto& e : std::filesystem::directory_iterator(blobs))
    served.push_back(e.path().string());
  REQUIRE(served.size() == 1);
  const std::string sha = std::filesystem::path(served[0]).filename().string();
  std::ofstream(served[0] + ".new") << "not the video";
  std::filesystem::rename(served[0] + ".new", served[0]);
  a = testing_support::start_node(dir.path(), config, "alpha");
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  auto st = testing_support::wait_status(cl, run_id, 90,
                                         [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  auto jobs = by_shot(st);
  CHECK(jobs["l1"]["state"] == "succeeded");
  CHECK(jobs["l1"]["output_sha256"] == sha);
  CHECK(jobs["l2"]["state"] == "failed");
  const std::string why = jobs["l2"]["error"].get<std::string>();
  CHECK(why.find("lies on host beta and could not be fetched from it: the bytes from host beta "
                 "hash to ")
        != std::string::npos);
  CHECK(why.find("not " + sha + " (nothing kept)") != std::string::npos);
  CHECK(jobs["l3"]["state"] == "failed");
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir.path() + "/alpha/inputs/videos", ec))
    FAIL_CHECK("left in the cache: " << e.path());
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
  CHECK(b->wait(30) == 0);
}
