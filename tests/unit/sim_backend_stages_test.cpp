// The sim encoder, sampler and decoder: products, timing on the scaled clock, cold/warm,
// capacity, cancel, timeout, corruption; and the backend factory.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <unistd.h>

#include "backends/backend.hpp"
#include "backends/sim/latent.hpp"
#include "config/shot_identity.hpp"
#include "tests/support/contract.hpp"
#include "backends/sim/sim_backend.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace {

namespace fs = std::filesystem;
using namespace vidline;
using namespace vidline::backends;
using namespace vidline::backends::sim;

constexpr double fast = 0.0005;  // 100 run-clock seconds in 50 ms

/// A fresh directory, removed at the end of the test.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("vidline-sim-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// A profile with small latents (4,160 bytes at 416x736x5), so generation costs nothing
/// and the stage times can be checked closely.
profile small_profile() {
  auto j = nlohmann::json::parse(std::string(profile::reference_json()));
  j["latent"]["bytes"] = 4160;
  return profile::from_json(j);
}

msg::job_spec job(uint64_t seed, uint32_t w, uint32_t h, uint32_t s) {
  msg::job_spec j;
  j.run_id = "r1";
  j.seed = seed;
  j.width = w;
  j.height = h;
  j.seconds = s;
  j.prompt = "a lighthouse in a storm";
  j.workflow = "default";  // as admission leaves a job of a sim backend named "sim"
  j.model = "sim";
  return j;
}

/// The contract's latent digest of job(seed, w, h, s), recomputed apart from the code.
std::string contract_latent(uint64_t seed, uint32_t w, uint32_t h, uint32_t s, uint64_t bytes) {
  contract::shot_ident id;
  id.prompt = "a lighthouse in a storm";
  id.model = "sim";
  return contract::latent_sha256(seed, w, h, s, bytes, contract::ident(id));
}

stage_env env_for(const std::string& out, const std::atomic<bool>* cancel = nullptr) {
  stage_env e;
  e.output_path = out;
  e.vendor = "nvidia";
  e.cancel = cancel;
  return e;
}

std::string latent_hex(uint64_t seed, uint32_t w, uint32_t h, uint32_t s, uint64_t bytes) {
  // The job's ident as config::ident writes it (checked against the contract's text in
  // sim_backend_latent_test).
  latent_generator g({seed, w, h, s, vidline::config::ident(job(seed, w, h, s))}, bytes);
  while (!g.done())
    g.next();
  return g.sha256_hex();
}

} // namespace

TEST_CASE("sampler: latent file, digest, cold then warm, on the scaled clock", "[sampler]") {
  temp_dir dir;
  auto prof = small_profile();
  auto sampler = make_sim_sampler(prof, {fast, "t10x8", "pool-a"});
  auto j = job(987654321123ull, 416, 736, 5);

  auto first = sampler->sample(j, "", env_for(dir / "a.latent"));
  REQUIRE(first.outcome == msg::outcome::ok);
  CHECK(first.cold);
  CHECK(first.bytes == 4160);
  CHECK(first.sha256 == latent_hex(j.seed, 416, 736, 5, 4160));
  uint64_t size = 0;
  CHECK(sha256_file_hex(dir / "a.latent", &size) == first.sha256);
  CHECK(size == 4160);
  CHECK_FALSE(fs::exists(dir / "a.latent.tmp"));
  double cold_s = prof.sampling("t10x8", {416, 736, 5}, model_state::cold).s;
  CHECK(first.elapsed_s >= cold_s);
  CHECK(first.elapsed_s < cold_s + 60);  // 30 ms of slack on a busy machine

  auto second = sampler->sample(j, "", env_for(dir / "b.latent"));
  REQUIRE(second.outcome == msg::outcome::ok);
  CHECK_FALSE(second.cold);
  CHECK(second.sha256 == first.sha256);  // same job, same latent
  double warm_s = prof.sampling("t10x8", {416, 736, 5}, model_state::warm).s;
  CHECK(second.elapsed_s >= warm_s);
  CHECK(second.elapsed_s < cold_s);
}

TEST_CASE("sampler: a pool sampling on shared GPUs makes the sharing pools cold",
          "[sampler]") {
  // The reference layouts: `eight` on t10-0..7, `four_a` on t10-0..3, `four_b` on t10-4..7,
  // and the XTX on its own card. Host name unique to this test (the GPUs' models are
  // tracked per process).
  temp_dir dir;
  auto prof = small_profile();
  std::vector<std::string> low{"t10-0", "t10-1", "t10-2", "t10-3"};
  std::vector<std::string> high{"t10-4", "t10-5", "t10-6", "t10-7"};
  std::vector<std::string> all = low;
  all.insert(all.end(), high.begin(), high.end());
  const std::string host = "shared-gpu-test";
  auto eight = make_sim_sampler(prof, {fast, "t10x8", "eight", host, all});
  auto four_a = make_sim_sampler(prof, {fast, "t10x4", "four_a", host, low});
  auto four_b = make_sim_sampler(prof, {fast, "t10x4", "four_b", host, high});
  auto xtx = make_sim_sampler(prof, {fast, "rx7900xtx", "xtx", host, {"xtx"}});
  int n = 0;
  auto cold = [&](sampler_backend& s) {
    auto r = s.sample(job(1, 416, 736, 5), "", env_for(dir / std::to_string(n++)));
    REQUIRE(r.outcome == msg::outcome::ok);
    return r.cold;
  };
  CHECK(cold(*four_a));
  CHECK(cold(*four_b));
  CHECK_FALSE(cold(*four_a));
  CHECK(cold(*xtx));
  CHECK(cold(*eight));        // first job
  CHECK(cold(*four_a));       // eight took t10-0..3
  CHECK(cold(*four_b));       // and t10-4..7
  CHECK(cold(*eight));        // four_a and four_b took them back
  CHECK_FALSE(cold(*eight));
  CHECK_FALSE(cold(*xtx));    // no GPU shared with the T10 pools
  // A decoder on one of eight's cards unloads it too.
  auto t10_decoder =
    make_sim_decoder(prof, {fast, "t10", "t10_a", host, {"t10-7"}});
  auto sampled = eight->sample(job(2, 416, 736, 5), "", env_for(dir / "for-decode"));
  REQUIRE(sampled.outcome == msg::outcome::ok);
  auto decoded = t10_decoder->decode(job(2, 416, 736, 5), dir / "for-decode", sampled.sha256,
                                     env_for(dir / "video"));
  REQUIRE(decoded.outcome == msg::outcome::ok);
  CHECK(cold(*eight));
  CHECK_FALSE(cold(*eight));
  // Samplers on another host never evict these.
  auto elsewhere = make_sim_sampler(prof, {fast, "t10x4", "four_a", "other-host", low});
  CHECK(cold(*elsewhere));
  CHECK_FALSE(cold(*eight));
}

TEST_CASE("sampler: a job of another model than the one loaded is cold (a switch)",
          "[sampler]") {
  temp_dir dir;
  auto prof = small_profile();
  auto pool = make_sim_sampler(prof, {fast, "rx7900xtx", "xtx", "model-switch-test", {"xtx"}});
  int n = 0;
  auto cold = [&](const std::string& model) {
    auto j = job(1, 416, 736, 5);
    j.model = model;
    auto r = pool->sample(j, "", env_for(dir / std::to_string(n++)));
    REQUIRE(r.outcome == msg::outcome::ok);
    return r.cold;
  };
  CHECK(cold("wan-t2v"));        // first job
  CHECK_FALSE(cold("wan-t2v"));
  CHECK(cold("wan-i2v"));        // switched
  CHECK_FALSE(cold("wan-i2v"));
  CHECK(cold("wan-t2v"));        // and back
}

TEST_CASE("sampler: the reference latent, full size, matches its contract digest",
          "[sampler]") {
  temp_dir dir;
  auto sampler = make_sim_sampler(profile::reference(), {fast, "t10x4", "pool-b"});
  auto r = sampler->sample(job(987654321123ull, 416, 736, 5), "", env_for(dir / "l"));
  REQUIRE(r.outcome == msg::outcome::ok);
  CHECK(r.bytes == 13000000);
  CHECK(r.sha256 == contract_latent(987654321123ull, 416, 736, 5, 13000000));
  CHECK(sha256_file_hex(dir / "l") == r.sha256);
}

TEST_CASE("sampler: a size over the pool's capacity fails as capacity after its time",
          "[sampler]") {
  temp_dir dir;
  auto prof = small_profile();
  auto sampler = make_sim_sampler(prof, {fast, "t10x8", "pool-a"});
  auto r = sampler->sample(job(1, 640, 1152, 15), "", env_for(dir / "oom"));
  CHECK(r.outcome == msg::outcome::capacity);
  CHECK_THAT(r.error, Catch::Contains("CUDA out of memory"));
  CHECK(r.elapsed_s >= 204.389);
  CHECK(r.cold);
  CHECK_FALSE(fs::exists(dir / "oom"));
  CHECK_FALSE(fs::exists(dir / "oom.tmp"));

  // 4 x T10 cannot hold 736x1280x10; the AMD card reports HIP, not CUDA.
  auto small = make_sim_sampler(prof, {fast, "t10x4", "pool-b"});
  auto e = env_for(dir / "oom2");
  e.vendor = "amd";
  auto r2 = small->sample(job(1, 736, 1280, 10), "", e);
  CHECK(r2.outcome == msg::outcome::capacity);
  CHECK_THAT(r2.error, Catch::StartsWith("HIP out of memory"));
}

TEST_CASE("sampler: cancel returns transient/cancelled promptly and leaves nothing",
          "[sampler]") {
  temp_dir dir;
  std::atomic<bool> cancel{true};
  auto sampler = make_sim_sampler(profile::reference(), {1.0, "t10x8", "pool-a"});
  auto r = sampler->sample(job(1, 416, 736, 5), "", env_for(dir / "c", &cancel));
  CHECK(r.outcome == msg::outcome::transient);
  CHECK(r.error == "cancelled");
  CHECK_FALSE(fs::exists(dir / "c"));
  CHECK_FALSE(fs::exists(dir / "c.tmp"));

  // Cancelled while it runs: a 107 s cold job at 1 real second per second.
  cancel = false;
  auto t0 = std::chrono::steady_clock::now();
  std::thread canceller([&] { cancel = true; });
  auto r2 = sampler->sample(job(1, 416, 736, 5), "", env_for(dir / "c2", &cancel));
  canceller.join();
  double real = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r2.outcome == msg::outcome::transient);
  CHECK(r2.error == "cancelled");
  CHECK(real < 2.0);
  CHECK_FALSE(fs::exists(dir / "c2"));
  CHECK_FALSE(fs::exists(dir / "c2.tmp"));

  // A cancelled attempt did not leave the model loaded: the next one is still cold.
  cancel = false;
  auto fast_sampler = make_sim_sampler(small_profile(), {fast, "t10x8", "pool-a"});
  cancel = true;
  fast_sampler->sample(job(1, 416, 736, 5), "", env_for(dir / "c3", &cancel));
  cancel = false;
  CHECK(fast_sampler->sample(job(1, 416, 736, 5), "", env_for(dir / "c3", &cancel)).cold);
}

TEST_CASE("sampler: the stage timeout ends it as transient, naming the timeout", "[sampler]") {
  temp_dir dir;
  auto sampler = make_sim_sampler(small_profile(), {fast, "t10x8", "pool-a"});
  auto e = env_for(dir / "t");
  e.timeout_s = 20;  // the cold job takes 107.5 s
  auto r = sampler->sample(job(1, 416, 736, 5), "", e);
  CHECK(r.outcome == msg::outcome::transient);
  CHECK_THAT(r.error, Catch::Contains("timeout") && Catch::Contains("20"));
  CHECK(r.elapsed_s >= 20);
  CHECK(r.elapsed_s < 100);
  CHECK_FALSE(fs::exists(dir / "t"));
  CHECK_FALSE(fs::exists(dir / "t.tmp"));
}

TEST_CASE("encoder writes the prompt's conditioning, the sampler checks it", "[encoder]") {
  temp_dir dir;
  auto prof = small_profile();
  auto encoder = make_sim_encoder(prof, {fast, "t10x4", "enc-a"});
  auto j = job(5, 416, 736, 5);
  auto r = encoder->encode(j.prompt, env_for(dir / "cond"));
  REQUIRE(r.outcome == msg::outcome::ok);
  CHECK(r.cold);
  CHECK(r.elapsed_s >= 13.06);
  std::string text = files::read_all(dir / "cond");
  CHECK(text == conditioning_file_text(j.prompt));
  CHECK(conditioning_prompt_sha256(text) == to_hex(sha256_of(j.prompt)));
  CHECK(r.sha256 == to_hex(sha256_of(text)));

  auto sampler = make_sim_sampler(prof, {fast, "t10x8", "pool-a"});
  CHECK(sampler->sample(j, dir / "cond", env_for(dir / "l1")).outcome == msg::outcome::ok);
  auto other = j;
  other.prompt = "a different prompt";
  auto bad = sampler->sample(other, dir / "cond", env_for(dir / "l2"));
  CHECK(bad.outcome == msg::outcome::corrupt);
  CHECK_FALSE(fs::exists(dir / "l2"));
  CHECK(sampler->sample(j, dir / "missing", env_for(dir / "l3")).outcome ==
        msg::outcome::transient);
}

TEST_CASE("decoder: the contract's text for a good latent, nothing for a corrupt one",
          "[decoder]") {
  temp_dir dir;
  auto ref = profile::reference();
  auto j = job(987654321123ull, 416, 736, 5);
  auto sampler = make_sim_sampler(ref, {fast, "t10x8", "pool-a"});
  auto s = sampler->sample(j, "", env_for(dir / "latent"));
  REQUIRE(s.outcome == msg::outcome::ok);

  auto decoder = make_sim_decoder(ref, {fast, "rtx3080ti", "dec"});
  auto d = decoder->decode(j, dir / "latent", s.sha256, env_for(dir / "video.txt"));
  REQUIRE(d.outcome == msg::outcome::ok);
  const std::string want =
      "vidline-sim-video 1\n"
      "latent_sha256 " + contract_latent(987654321123ull, 416, 736, 5, 13000000) + "\n"
      "seed 987654321123\n"
      "size 416x736\n"
      "seconds 5\n";
  CHECK(files::read_all(dir / "video.txt") == want);
  CHECK(d.sha256 == to_hex(sha256_of(want)));
  CHECK(d.bytes == want.size());
  CHECK(d.elapsed_s >= 12.02);

  // One byte flipped: refused, nothing written.
  std::string bytes = files::read_all(dir / "latent");
  bytes[6500000] ^= 0x01;
  files::write_atomic(dir / "bad", bytes);
  auto c = decoder->decode(j, dir / "bad", s.sha256, env_for(dir / "bad-video.txt"));
  CHECK(c.outcome == msg::outcome::corrupt);
  CHECK_THAT(c.error, Catch::Contains(s.sha256));
  CHECK_FALSE(fs::exists(dir / "bad-video.txt"));

  // A missing latent can be fetched again; a malformed digest is the caller's bug.
  CHECK(decoder->decode(j, dir / "nope", s.sha256, env_for(dir / "v2")).outcome ==
        msg::outcome::transient);
  CHECK(decoder->decode(j, dir / "latent", "ABC", env_for(dir / "v3")).outcome ==
        msg::outcome::fatal);

  std::atomic<bool> cancel{true};
  auto x = decoder->decode(j, dir / "latent", s.sha256, env_for(dir / "v4", &cancel));
  CHECK(x.outcome == msg::outcome::transient);
  CHECK(x.error == "cancelled");
  CHECK_FALSE(fs::exists(dir / "v4"));
}

TEST_CASE("factory: sim from a config entry, exec and comfyui check their own options", "[factory]") {
  backend_params p;
  p.backend.name = "b";
  p.backend.type = "sim";
  p.backend.time_scale = fast;
  p.profile_key = "t10x8";
  p.owner = "pool-a";
  CHECK(make_sampler(p) != nullptr);
  p.profile_key = "rtx3080ti";
  CHECK(make_decoder(p) != nullptr);
  p.profile_key = "rx7900xtx";
  CHECK(make_encoder(p) != nullptr);
  CHECK(make_sampler(p) != nullptr);

  p.profile_key = "h100x8";
  CHECK_THROWS_WITH(make_sampler(p), Catch::Contains("h100x8"));
  p.profile_key = "t10x8";
  p.backend.time_scale = -1;
  CHECK_THROWS_AS(make_sampler(p), std::runtime_error);
  p.backend.time_scale = fast;
  p.backend.profile = "/nonexistent/profile.json";
  CHECK_THROWS_WITH(make_sampler(p), Catch::Contains("/nonexistent/profile.json"));
  p.backend.profile.clear();
  p.backend.options = {{"speed", 2}};
  CHECK_THROWS_WITH(make_sampler(p), Catch::Contains("unknown option 'speed'"));

  for (const char* type : {"exec", "comfyui"}) {
    p.backend.type = type;
    // Built now: each type checks its own options, naming a key it does not know.
    INFO(type);
    CHECK_THROWS_WITH(make_encoder(p), Catch::Contains("/backends/b/options/speed: unknown key 'speed'"));
    CHECK_THROWS_WITH(make_sampler(p), Catch::Contains("/backends/b/options/speed: unknown key 'speed'"));
    CHECK_THROWS_WITH(make_decoder(p), Catch::Contains("/backends/b/options/speed: unknown key 'speed'"));
  }
  p.backend.type = "cuda";
  CHECK_THROWS_WITH(make_sampler(p), Catch::Contains("unknown type 'cuda'"));
}

TEST_CASE("sampler: a job's reference image is verified against its reference_sha256",
          "[sampler]") {
  temp_dir dir;
  auto sampler = make_sim_sampler(small_profile(), {fast, "t10x8", "pool-a"});
  auto j = job(7, 416, 736, 5);
  const std::string ref = dir / "ref.png";
  files::write_atomic(ref, "the reference image");
  j.reference = ref;
  j.reference_sha256 = to_hex(sha256_of("the reference image"));

  auto ok = sampler->sample(j, "", env_for(dir / "ok.latent"));
  CHECK(ok.outcome == msg::outcome::ok);

  // Other bytes at the path: corrupt, no latent.
  files::write_atomic(ref, "another image");
  auto bad = sampler->sample(j, "", env_for(dir / "bad.latent"));
  CHECK(bad.outcome == msg::outcome::corrupt);
  CHECK(bad.error.find("hashes to") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bad.latent"));

  // Missing: transient (the host pulls it again), no latent.
  fs::remove(ref);
  auto gone = sampler->sample(j, "", env_for(dir / "gone.latent"));
  CHECK(gone.outcome == msg::outcome::transient);
  CHECK(gone.error.find("missing") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "gone.latent"));

  // No path at all for a job that names a digest: the same.
  j.reference.clear();
  CHECK(sampler->sample(j, "", env_for(dir / "none.latent")).outcome == msg::outcome::transient);

  // No reference_sha256: nothing to verify (the uniform form without a reference).
  j.reference_sha256.clear();
  CHECK(sampler->sample(j, "", env_for(dir / "plain.latent")).outcome == msg::outcome::ok);
}
