// The worker backend with real worker processes (tests/support/programs/fake_worker.py,
// written with the project's Python client library): one process serves every request
// and reports cold then warm; progress arrives; a worker that dies mid-job costs that
// attempt only; cancel and the stage timeout stop a request, and a worker that ignores a
// cancel is killed and restarted; every outcome class; a crash loop gives up.

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/worker/worker_backend.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::backends;
using json = nlohmann::json;
using testing_support::read_file;
using testing_support::temp_dir;

namespace {

const std::string fake = std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/fake_worker.py";

config::backend worker_backend(const std::string& mode, json extra, const std::string& dir) {
  config::backend b;
  b.name = "w";
  b.type = "worker";
  b.options = {{"argv", {"/usr/bin/python3", fake, mode}},
               {"log_dir", dir + "/logs"},
               {"cancel_grace_s", 1},
               {"stop_grace_s", 2},
               {"start_timeout_s", 60},
               {"env", {{"FAKE_WORKER_STARTS", dir + "/starts"}, {"FAKE_WORKER_LOADS", dir + "/loads"},
                        {"FAKE_WORKER_MARKERS", dir}}}};
  if (extra.is_object())
    b.options.update(extra);
  return b;
}

msg::job_spec job(uint64_t seed) {
  msg::job_spec j;
  j.run_id = "run-1";
  j.index = static_cast<uint32_t>(seed);
  j.seed = seed;
  j.width = 24;
  j.height = 16;
  j.seconds = 1;
  j.prompt = "a prompt";
  return j;
}

struct attempt_env {
  stage_env env;
  std::atomic<bool> cancel{false};
  std::vector<std::pair<uint32_t, uint32_t>> steps;

  attempt_env(const std::string& dir, const std::string& name, double timeout_s = 30) {
    env.work_dir = dir + "/work/" + name;
    env.output_path = dir + "/out/" + name + ".latent";
    env.devices = {"0", "2"};
    env.vendor = "nvidia";
    env.timeout_s = timeout_s;
    env.cancel = &cancel;
    env.progress = [this](uint32_t i, uint32_t n) { steps.emplace_back(i, n); };
  }
};

std::size_t lines_of(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);)
    n += !l.empty();
  return n;
}

} // namespace

TEST_CASE("worker: one process serves every request, cold first then warm, with progress", "[worker]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({worker_backend("ok", {}, dir.path()), "k", "pool_x"});
  std::set<std::string> pids;
  for (int i = 0; i < 3; ++i) {
    attempt_env a(dir.path(), "a" + std::to_string(i));
    auto r = s->sample(job(100 + i), "/nonexistent/cond", a.env);
    INFO(r.error);
    REQUIRE(r.outcome == "ok");
    CHECK(r.cold == (i == 0));
    std::string content = read_file(a.env.output_path);
    CHECK(r.sha256 == to_hex(sha256_of(content)));
    CHECK(r.bytes == content.size());
    CHECK(content.rfind("sample " + std::to_string(100 + i) + " ", 0) == 0);
    pids.insert(content.substr(content.rfind(' ') + 1));
    CHECK(a.steps == std::vector<std::pair<uint32_t, uint32_t>>{{1, 3}, {2, 3}, {3, 3}});
    CHECK_FALSE(std::filesystem::exists(a.env.work_dir + "/product-a" + std::to_string(i) + ".latent"));
  }
  CHECK(pids.size() == 1);
  CHECK(lines_of(dir.path() + "/starts") == 1);
  CHECK(lines_of(dir.path() + "/loads") == 1);
  CHECK(std::filesystem::exists(dir.path() + "/logs/pool_x/worker.log"));
}

TEST_CASE("worker: dying mid-job costs that attempt only, the successor takes the next", "[worker]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({worker_backend("die_once", {}, dir.path()), "k", "pool_x"});
  attempt_env a(dir.path(), "a1");
  auto r = s->sample(job(1), "", a.env);
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("died mid-job") != std::string::npos);
  attempt_env b(dir.path(), "a2");
  auto r2 = s->sample(job(2), "", b.env);
  INFO(r2.error);
  CHECK(r2.outcome == "ok");
  CHECK(r2.cold);  // a new process loads its model again
  CHECK(lines_of(dir.path() + "/starts") == 2);
}

TEST_CASE("worker: cancel ends a request promptly and keeps the worker", "[worker]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({worker_backend("slow", {}, dir.path()), "k", "pool_x"});
  attempt_env warm(dir.path(), "a0");
  REQUIRE(s->sample(job(1), "", warm.env).outcome == "ok");
  attempt_env a(dir.path(), "a1");
  std::thread t([&] {
    while (a.steps.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    a.cancel = true;
  });
  auto start = std::chrono::steady_clock::now();
  auto r = s->sample(job(2), "", a.env);
  t.join();
  CHECK(r.outcome == "transient");
  CHECK(r.error == "cancelled");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  attempt_env b(dir.path(), "a2");
  auto r2 = s->sample(job(3), "", b.env);
  CHECK(r2.outcome == "ok");
  CHECK_FALSE(r2.cold);
  CHECK(lines_of(dir.path() + "/starts") == 1);
}

TEST_CASE("worker: one that ignores a cancel or the stage timeout is killed and restarted", "[worker]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({worker_backend("deaf", {}, dir.path()), "k", "pool_x"});
  attempt_env a(dir.path(), "a1", 1.0);
  auto start = std::chrono::steady_clock::now();
  auto r = s->sample(job(1), "", a.env);
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("timeout") == 0);
  CHECK(r.error.find("killed") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // The successor is started; this request is cancelled while waiting or running.
  attempt_env b(dir.path(), "a2");
  b.cancel = true;
  CHECK(s->sample(job(2), "", b.env).error == "cancelled");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lines_of(dir.path() + "/starts") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(lines_of(dir.path() + "/starts") == 2);
}

TEST_CASE("worker: outcome classes", "[worker]") {
  temp_dir dir;
  auto outcome = [&](const std::string& mode) {
    auto s = worker::make_worker_sampler({worker_backend(mode, {}, dir.path() + "/" + mode), "k", "p"});
    attempt_env a(dir.path() + "/" + mode, "a1", 20);
    auto r = s->sample(job(1), "", a.env);
    return r.outcome + ": " + r.error;
  };
  CHECK(outcome("oom").rfind("capacity: ", 0) == 0);
  CHECK(outcome("transient").find("transient: worker sample (p): Transient: the disk was busy") == 0);
  CHECK(outcome("no_output").rfind("fatal: worker sample (p): the worker said ok but", 0) == 0);
  CHECK(outcome("garbage").rfind("fatal: ", 0) == 0);
  CHECK(outcome("die").rfind("transient: ", 0) == 0);
}

TEST_CASE("worker: a stage the worker does not serve is fatal, a bad latent is corrupt", "[worker]") {
  temp_dir dir;
  auto e = worker::make_worker_encoder(
    {worker_backend("ok", {{"env", {{"FAKE_WORKER_STAGES", "sample"}}}}, dir.path()), "k", "enc"});
  attempt_env a(dir.path(), "a1");
  auto r = e->encode("prompt", a.env);
  CHECK(r.outcome == "fatal");
  CHECK(r.error.find("serves only sample, not encode") != std::string::npos);

  auto d = worker::make_worker_decoder({worker_backend("ok", {}, dir.path()), "k", "dec"});
  std::string latent = dir.path() + "/latent";
  std::ofstream(latent) << "bytes";
  attempt_env b(dir.path(), "a2");
  auto bad = d->decode(job(1), latent, std::string(64, 'a'), b.env);
  CHECK(bad.outcome == "corrupt");
  auto good = d->decode(job(1), latent, to_hex(sha256_of(std::string("bytes"))), b.env);
  INFO(good.error);
  CHECK(good.outcome == "ok");
}

TEST_CASE("worker: a worker that never says hello, or crash-loops, gives up", "[worker]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler(
    {worker_backend("flaky_start", {{"max_restarts", 1}, {"restart_period_s", 60}}, dir.path()),
     "k", "p"});
  attempt_env a(dir.path(), "a1", 20);
  auto r = s->sample(job(1), "", a.env);
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("gave up") != std::string::npos);
  CHECK(lines_of(dir.path() + "/starts") == 2);

  temp_dir dir2;
  auto q = worker::make_worker_sampler(
    {worker_backend("no_hello", {{"start_timeout_s", 1}, {"max_restarts", 0}}, dir2.path()), "k", "p"});
  attempt_env b(dir2.path(), "a1", 20);
  auto r2 = q->sample(job(1), "", b.env);
  CHECK(r2.outcome == "transient");
  CHECK(r2.error.find("no hello within") != std::string::npos);
}

TEST_CASE("worker: a warm start loads the model before the first request, which is warm", "[worker]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({worker_backend("ok", {}, dir.path()), "k", "pool_x"});
  CHECK(s->loaded_model() == std::make_optional(std::pair<std::string, std::string>{}));
  attempt_env w(dir.path(), "warm");
  auto warmed = s->warm({"wf", "m1", w.env});
  INFO(warmed.error);
  REQUIRE(warmed.warmed);
  CHECK(warmed.model == "m1");
  CHECK(warmed.model_identity == "sha256:fake-sample");
  CHECK(lines_of(dir.path() + "/loads") == 1);
  CHECK(s->loaded_model() == std::make_optional(std::pair<std::string, std::string>{"m1", "sha256:fake-sample"}));
  attempt_env a(dir.path(), "a1");
  auto j = job(7);
  j.model = "m1";
  auto r = s->sample(j, "", a.env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK_FALSE(r.cold);
  CHECK(r.model == "m1");
  CHECK(r.model_identity == "sha256:fake-sample");
  CHECK(lines_of(dir.path() + "/loads") == 1);
  CHECK(lines_of(dir.path() + "/starts") == 1);
}

TEST_CASE("worker: one that does not take load requests, or answers oddly, is not warmed and serves on", "[worker]") {
  auto mode = GENERATE(std::string("old_hello"), std::string("odd_load"));
  INFO(mode);
  temp_dir dir;
  auto s = worker::make_worker_sampler({worker_backend(mode, {}, dir.path()), "k", "pool_x"});
  attempt_env w(dir.path(), "warm");
  auto warmed = s->warm({"wf", "m1", w.env});
  CHECK_FALSE(warmed.warmed);
  CHECK(warmed.error.find(mode == "old_hello" ? "load requests" : "surprise") != std::string::npos);
  attempt_env a(dir.path(), "a1");
  auto j = job(8);
  j.model = "m1";
  auto r = s->sample(j, "", a.env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(r.cold == (mode == "old_hello"));  // odd_load did load; only its answer was odd
  CHECK(r.model == "m1");
  CHECK(lines_of(dir.path() + "/starts") == 1);  // not killed for it
}
