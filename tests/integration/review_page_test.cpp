// The review page in headless Chromium against a real line: one node process running the
// `exec` backend, its decoder a program that makes a real MP4 with ffmpeg. A reviewer's
// session is driven over the DevTools protocol (tests/support/programs/review_page.py): the
// cards name their shots, a card's thumbnail is a frame of its video (taken by the node
// with ffmpeg), a click plays the video through the node (its currentTime moves on), and
// "Reject + another take" adds the shot's next take to the finished run, which the API,
// the journal's status and the run index then show.
#include <catch2/catch.hpp>

#include <filesystem>

#include <httplib.h>

#include "tests/support/cluster.hpp"

using namespace testing_support;

namespace {

const char* token = "review-token-0123456789";
const std::string chromium = "/usr/bin/chromium";

json gpu(const std::string& id, const std::string& model, int index) {
  return {{"id", id}, {"model", model}, {"vendor", "nvidia"}, {"memory_gib", 16}, {"index", index}};
}

/// One host: coordinator, a pool and the decoder, HTTP with a token. The stages are
/// programs: the sampler writes a small latent, the decoder an H.264 MP4 of the job's size
/// and length (ffmpeg's test pattern).
std::string write_config(const std::string& dir, int http_port) {
  auto ports = free_ports(1);
  const std::string sample = "printf 'latent of seed %s\\n' \"$1\" > \"$2\"";
  const std::string decode =
    "exec ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=$1x$2:rate=12:duration=$3 "
    "-pix_fmt yuv420p -c:v libx264 -preset ultrafast -movflags +faststart -f mp4 \"$4\"";
  json programs = {
    {"sample", {{"argv", {"/bin/sh", "-c", sample, "sh", "{seed}", "{output}"}}}},
    {"decode", {{"argv", {"/bin/sh", "-c", decode, "sh", "{width}", "{height}", "{seconds}", "{output}"}}}},
    {"kill_grace_s", 1}};
  std::ofstream(dir + "/token") << token << "\n";
  json cfg = {
    {"cluster", "review_line"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
       {"gpus", {gpu("g0", "Tesla T4", 0), gpu("d0", "RTX 3080 Ti", 1)}},
       {"http", {{"port", http_port}, {"token_file", dir + "/token"}}}}}},
    {"backends", {{"programs", {{"type", "exec"}, {"options", programs}}}}},
    {"pools", {{{"name", "pool"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "programs"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "alpha"}, {"gpu", "d0"}, {"backend", "programs"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "programs"}}}},
    {"modes", {{"one", {{"pools", {"pool"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 60}, {"decode_timeout_s", 60}}}};
  add_keys(cfg, dir);
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

httplib::Headers auth() { return {{"Authorization", std::string("Bearer ") + token}}; }

/// Polls the run's status over HTTP until `done` holds or `seconds` pass; the last seen.
template <class Pred>
json wait_run(httplib::Client& c, const std::string& run_id, double seconds, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  json last;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = c.Get(("/v1/runs/" + run_id).c_str(), auth()); r && r->status == 200) {
      last = json::parse(r->body);
      if (done(last))
        return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // status polling pace
  }
  return last;
}

} // namespace

TEST_CASE("review page: names, a thumbnail, a real MP4 playing, reject with another take") {
  INFO("Debian's chromium, ffmpeg and python3 are needed (launch/test installs them)");
  REQUIRE(std::filesystem::exists(chromium));
  REQUIRE(std::system("ffmpeg -version >/dev/null 2>&1") == 0);
  temp_dir dir;
  const int http = free_ports(1)[0];
  const auto config = write_config(dir.path(), http);
  auto node = start_node(dir.path(), config, "alpha");
  httplib::Client c("127.0.0.1", http);
  c.set_read_timeout(60);

  // A shot list over HTTP: two shots, named.
  const json shots = {
    {"mode", "one"},
    {"request_id", "review-1"},
    {"shots", {{{"prompt", "a harbour at dawn, gulls over the cranes"}, {"width", 160}, {"height", 96},
                {"seconds", 2}, {"seed", 100}, {"name", "harbour"}},
               {{"prompt", "a night market in the rain"}, {"width", 160}, {"height", 96},
                {"seconds", 2}, {"seed", 7}, {"name", "night"}}}}};
  // The node comes up: submitted once it answers (the request id makes a retry safe).
  int status = 0;
  std::string body;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (status == 0 || status == 503) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    if (auto sub = c.Post("/v1/runs", auth(), shots.dump(), "application/json")) {
      status = sub->status;
      body = sub->body;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // not listening yet
    }
  }
  INFO(body);
  REQUIRE(status == 201);
  const auto run_id = json::parse(body)["run_id"].get<std::string>();
  auto done = wait_run(c, run_id, 90, [](const json& s) { return s["state"] != "running"; });
  INFO(done.dump(2).substr(0, 3000));
  REQUIRE(done["state"] == "succeeded");
  REQUIRE(done["jobs"].size() == 2);
  CHECK(done["jobs"][0]["shot"] == "harbour");
  CHECK(done["jobs"][0]["take"] == 0);
  const std::string video = done["jobs"][0]["output"].get<std::string>();
  CHECK(video.substr(video.size() - 4) == ".mp4");

  // The thumbnail over HTTP: a JPEG, kept by the video's digest.
  auto thumb = c.Get(("/v1/runs/" + run_id + "/jobs/0/thumbnail?token=" + token).c_str());
  REQUIRE(thumb);
  INFO(thumb->body.substr(0, 300));
  REQUIRE(thumb->status == 200);
  CHECK(thumb->get_header_value("Content-Type") == "image/jpeg");
  CHECK(thumb->body.substr(0, 2) == "\xFF\xD8");
  const std::string sha = done["jobs"][0]["output_sha256"].get<std::string>();
  CHECK(std::filesystem::exists(dir.path() + "/alpha/review/" + sha + ".jpg"));

  // The reviewer's session in the browser.
  const std::string url = "http://127.0.0.1:" + std::to_string(http) + "/dashboard/#token=" + token;
  process page({"/usr/bin/python3", std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/review_page.py",
                chromium, url, dir.path() + "/chromium", "0", "2"},
               dir.path() + "/page.out");
  const int rc = page.wait(240);
  INFO("page: " << page.out() << "\n" << page.err());
  REQUIRE(rc == 0);
  auto seen = json::parse(page.out());
  CHECK(seen["titles"] == json::array({"#0 harbour", "#1 night"}));
  CHECK(seen["prompts"][0] == "a harbour at dawn, gulls over the cranes");
  CHECK(seen["thumb"]["width"] == 160);
  CHECK(seen["played"]["current"].get<double>() > seen["played"]["first"].get<double>());
  CHECK(seen["new_title"] == "#2 harbour-take-2");
  CHECK(seen["verdict"].get<std::string>().find("rejected · another take: #2") != std::string::npos);

  // The take: the shot's next seed, the rejected job named as its origin; it runs.
  auto after = wait_run(c, run_id, 90, [](const json& s) {
    return s["jobs"].size() == 3 && s["state"] == "succeeded";
  });
  INFO(after.dump(2).substr(0, 3000));
  REQUIRE(after["jobs"].size() == 3);
  CHECK(after["state"] == "succeeded");
  CHECK(after["jobs"][0]["review"]["verdict"] == "rejected");
  CHECK(after["jobs"][0]["review"]["take_index"] == 2);
  CHECK(after["jobs"][2]["shot"] == "harbour");
  CHECK(after["jobs"][2]["take"] == 1);
  CHECK(after["jobs"][2]["seed"] == 101);
  CHECK(after["jobs"][2]["retake_of"] == 0);
  CHECK(after["jobs"][2]["prompt_start"] == "a harbour at dawn, gulls over the cranes");

  // The run index: the video's line again, with the verdict (its decoder writes it there,
  // answering the coordinator: polled for).
  const std::string index_file = dir.path() + "/alpha/outputs/" + run_id + "/index.jsonl";
  std::map<std::string, json> index;
  auto deadline_index = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    std::vector<std::string> repeated;
    index = read_index(index_file, repeated);
    if ((index.count("harbour") && index["harbour"].contains("review"))
        || std::chrono::steady_clock::now() > deadline_index)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling the index file
  }
  REQUIRE(index.count("harbour"));
  CHECK(index["harbour"]["review"]["revision"] == 1);
  CHECK(index["harbour"]["review"]["verdict"] == "rejected");
  CHECK(index["harbour"]["review"]["take_index"] == 2);
  CHECK(index["harbour"]["output_sha256"] == sha);
  CHECK(index.count("harbour-take-2"));
}
