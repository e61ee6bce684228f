// The coordinator's input maker (actors/coordinator/input_maker.hpp) with a fetch the test
// plays: a video on another host is pulled once and decoded off the caller's thread, an
// input asked again while it is being made is answered once, a fetch that fails is answered
// as the input's error naming the host, a sim video's frame comes at once; a latent handed
// over is copied from this host's latents or fetched from its host, verified; a video
// uploaded by its digest is read where it was uploaded.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "actors/coordinator/input_maker.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;

namespace {

/// alpha (the coordinator's) holds decoder `sdec` (sim); beta holds `dec` (exec).
std::shared_ptr<config::cluster> two_hosts() {
  auto c = std::make_shared<config::cluster>();
  c->coordinator = "alpha";
  c->backends["sim"].type = "sim";
  c->backends["programs"].type = "exec";
  c->decoders.push_back({"sdec", "alpha", "g0", "sim", ""});
  c->decoders.push_back({"dec", "beta", "d0", "programs", ""});
  return c;
}

actors::context context_in(const std::string& dir) {
  actors::context ctx;
  ctx.host = "alpha";
  ctx.cluster = two_hosts();
  ctx.data_dir = dir;
  return ctx;
}

/// The answers the maker gives from its thread.
struct answers {
  std::mutex m;
  std::condition_variable cv;
  std::vector<actors::coordinator::ev_input_made> got;

  actors::coordinator::input_maker::answer_fn fn() {
    return [this](actors::coordinator::ev_input_made e) {
      std::lock_guard<std::mutex> l(m);
      got.push_back(std::move(e));
      cv.notify_all();
    };
  }
  bool wait_for(std::size_t n, double seconds = 60) {
    std::unique_lock<std::mutex> l(m);
    return cv.wait_for(l, std::chrono::duration<double>(seconds), [&] { return got.size() >= n; });
  }
};

actors::coordinator::fx_make_input ask_for(uint32_t index, const std::string& sha, const std::string& decoder,
                             uint32_t frame) {
  return {"run1", index, "first_frame", 0, "/elsewhere/outputs/run1/l1.mp4", sha, decoder, frame, 25};
}

} // namespace

TEST_CASE("input maker: a video on another host is fetched once, off the caller's thread") {
  testing_support::temp_dir dir("vl-input-maker");
  // A real 25-frame video, as beta's decoder would have made it.
  const std::string video = dir.path() + "/made.mp4";
  const std::string latent = dir.path() + "/latent";
  files::write_atomic(latent, "a latent");
  const std::string lsha = to_hex(sha256_of(std::string("a latent")));
  REQUIRE(std::system((std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/ffmpeg_video.sh "
                       + latent + " " + lsha + " 25 24 32 32 " + video).c_str())
          == 0);
  const std::string sha = to_hex(sha256_of(files::read_all(video)));

  std::mutex fm;
  std::condition_variable fcv;
  bool release = false;
  std::vector<std::string> fetched;
  actors::coordinator::video_fetch fetch = [&](const std::string& host, const std::string& s,
                                  const std::string& dest) -> std::string {
    std::unique_lock<std::mutex> l(fm);
    fetched.push_back(host + " " + s);
    fcv.wait(l, [&] { return release; });
    std::filesystem::copy_file(video, dest);
    return "";
  };
  answers a;
  actors::coordinator::input_maker maker(context_in(dir.path()), fetch, a.fn());
  // Asked, asked again while being made (the machine re-asks): no answer now, one later.
  CHECK_FALSE(maker.ask(ask_for(1, sha, "dec", 24)));
  CHECK_FALSE(maker.ask(ask_for(1, sha, "dec", 24)));
  // Another shot taking frame 0 of the same video: made after, from the same copy.
  CHECK_FALSE(maker.ask(ask_for(2, sha, "dec", 0)));
  {
    std::lock_guard<std::mutex> l(fm);
    release = true;
  }
  fcv.notify_all();
  REQUIRE(a.wait_for(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a third answer would be wrong
  std::lock_guard<std::mutex> l(a.m);
  REQUIRE(a.got.size() == 2);
  CHECK(fetched == std::vector<std::string>{"beta " + sha});
  for (auto& e : a.got) {
    INFO(e.error);
    CHECK(e.error.empty());
    CHECK(e.bytes > 0);
    CHECK(files::read_all(dir.path() + "/inputs/" + e.sha256).substr(1, 3) == "PNG");
  }
  CHECK(a.got[0].index == 1);
  CHECK(a.got[1].index == 2);
  CHECK(a.got[0].sha256 != a.got[1].sha256);  // frame 24 and frame 0 differ
  CHECK(files::read_all(actors::coordinator::input_video_dir(context_in(dir.path())) + "/" + sha)
        == files::read_all(video));
}

TEST_CASE("input maker: a fetch that fails is the input's error, naming the host and video") {
  testing_support::temp_dir dir("vl-input-maker");
  const std::string sha(64, 'a');
  actors::coordinator::video_fetch fetch = [](const std::string& host, const std::string&, const std::string&) {
    return "no answer from host " + host + " for 6 s";
  };
  answers a;
  actors::coordinator::input_maker maker(context_in(dir.path()), fetch, a.fn());
  CHECK_FALSE(maker.ask(ask_for(1, sha, "dec", 24)));
  REQUIRE(a.wait_for(1));
  std::lock_guard<std::mutex> l(a.m);
  CHECK(a.got[0].sha256.empty());
  CHECK(a.got[0].error
        == "the video of job 0 (decoder dec) lies on host beta and could not be fetched from "
           "it: no answer from host beta for 6 s");
  CHECK_FALSE(std::filesystem::exists(actors::coordinator::input_video_dir(context_in(dir.path())) + "/" + sha));
}

TEST_CASE("input maker: a sim video's frame is made at once, on the caller's thread") {
  testing_support::temp_dir dir("vl-input-maker");
  const std::string sha(64, 'b');
  answers a;
  actors::coordinator::input_maker maker(context_in(dir.path()), {}, a.fn());
  auto made = maker.ask(ask_for(1, sha, "sdec", 24));
  REQUIRE(made);
  CHECK(made->error.empty());
  CHECK(made->sha256 == to_hex(sha256_of(config::graph::sim_frame(sha, 24))));
}

TEST_CASE("input maker: a latent handed over is copied or fetched, verified, kept as an input") {
  testing_support::temp_dir dir("vl-input-maker");
  const auto ctx = context_in(dir.path());
  const std::string bytes = "the latent of job 0";
  const std::string sha = to_hex(sha256_of(bytes));
  actors::coordinator::fx_make_input fx{"run1", 1, "init_latent", 0, "", sha, "dec", 0, 0, true, "alpha"};
  // Sampled on this host: copied from its latents.
  files::make_dirs(actors::latent_dir(ctx));
  files::write_atomic(actors::latent_dir(ctx) + "/" + sha + ".latent", bytes);
  auto made = actors::coordinator::make_input(ctx, fx);
  CHECK(made.error.empty());
  CHECK(made.sha256 == sha);
  CHECK(made.bytes == bytes.size());
  CHECK(files::read_all(dir.path() + "/inputs/" + sha) == bytes);

  // Other bytes under the digest on this host: refused, nothing kept.
  const std::string other_sha(64, 'e');
  files::write_atomic(actors::latent_dir(ctx) + "/" + other_sha + ".latent", "not it");
  fx.output_sha256 = other_sha;
  made = actors::coordinator::make_input(ctx, fx);
  CHECK(made.sha256.empty());
  CHECK(made.error.find("the latent of job 0 on this host could not be taken: ") == 0);
  CHECK(made.error.find("hashes to") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/inputs/" + other_sha));

  // Sampled on beta: pulled from there (the fetch the node gives the maker).
  const std::string far = "a latent sampled on beta";
  const std::string far_sha = to_hex(sha256_of(far));
  std::vector<std::string> asked;
  actors::coordinator::video_fetch fetch_latent = [&](const std::string& host, const std::string& s,
                                         const std::string& dest) -> std::string {
    asked.push_back(host + " " + s);
    if (s != far_sha)
      return "host " + host + " no longer holds that latent (released)";
    files::write_atomic(dest, far);
    return "";
  };
  fx.output_sha256 = far_sha;
  fx.latent_host = "beta";
  made = actors::coordinator::make_input(ctx, fx, {}, fetch_latent);
  CHECK(made.error.empty());
  CHECK(made.sha256 == far_sha);
  CHECK(files::read_all(dir.path() + "/inputs/" + far_sha) == far);
  // Asked again: the kept copy, no second transfer.
  made = actors::coordinator::make_input(ctx, fx, {}, fetch_latent);
  CHECK(made.error.empty());
  CHECK(asked.size() == 1);
  fx.output_sha256 = std::string(64, 'f');
  made = actors::coordinator::make_input(ctx, fx, {}, fetch_latent);
  CHECK(made.error == "the latent of job 0 lies on host beta and could not be fetched from it: "
                      "host beta no longer holds that latent (released)");
}

TEST_CASE("input maker: a video uploaded by its digest is read there, not fetched") {
  testing_support::temp_dir dir("vl-input-maker");
  const std::string video = dir.path() + "/made.mp4";
  const std::string latent = dir.path() + "/latent";
  files::write_atomic(latent, "another latent");
  REQUIRE(std::system((std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/ffmpeg_video.sh "
                       + latent + " " + to_hex(sha256_of(std::string("another latent")))
                       + " 25 24 32 32 " + video).c_str())
          == 0);
  const std::string sha = to_hex(sha256_of(files::read_all(video)));
  // As `vidline run --collect` uploads a collected video another shot takes a frame of.
  files::make_dirs(dir.path() + "/inputs");
  std::filesystem::copy_file(video, dir.path() + "/inputs/" + sha);
  actors::coordinator::video_fetch fetch = [](const std::string& host, const std::string&, const std::string&) {
    return "host " + host + " has no video of that SHA-256";
  };
  auto made = actors::coordinator::make_input(context_in(dir.path()), ask_for(1, sha, "dec", 24), fetch);
  INFO(made.error);
  CHECK(made.error.empty());
  CHECK(files::read_all(dir.path() + "/inputs/" + made.sha256).substr(1, 3) == "PNG");
}
