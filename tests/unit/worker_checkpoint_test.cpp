// The worker backend's checkpoints with a real worker process (tests/worker/pure_worker.py,
// written with the project's Python client): each checkpoint the worker saves in its
// request's folder reaches the pool's side (a file named outside that folder is refused);
// a request cancelled after a checkpoint is resumed from it by the next one, which runs
// only the steps after it and ends with the uninterrupted latent byte for byte; asked to
// make way (preempt) the worker saves at its next step and the stage ends "preempted".

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

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
namespace fs = std::filesystem;

namespace {

const std::string pure = std::string(VIDLINE_SOURCE_DIR) + "/tests/worker/pure_worker.py";

config::backend pure_backend(const std::string& dir, json env = json::object()) {
  config::backend b;
  b.name = "w";
  b.type = "worker";
  env.update({{"PURE_STEPS", "12"}, {"PURE_EVERY", "3"}, {"PURE_SLEEP", "0.05"}});
  b.options = {{"argv", {"/usr/bin/python3", pure}},
               {"log_dir", dir + "/logs"},
               {"cancel_grace_s", 1},
               {"stop_grace_s", 2},
               {"start_timeout_s", 60},
               {"env", env}};
  return b;
}

msg::job_spec job() {
  msg::job_spec j;
  j.run_id = "run-1";
  j.index = 0;
  j.seed = 99;
  j.width = 24;
  j.height = 16;
  j.seconds = 1;
  j.prompt = "a prompt";
  return j;
}

/// One attempt's stage env, checkpoints handed over into <dir>/store as the pool moves
/// them into its latent store, progress and checkpoints recorded.
struct attempt {
  stage_env env;
  std::atomic<bool> cancel{false};
  std::atomic<bool> preempt{false};
  std::mutex m;
  std::vector<uint32_t> steps;        ///< progress
  std::vector<uint32_t> saved;        ///< checkpoints handed over
  std::vector<std::string> stored;    ///< their copies
  std::vector<std::string> files;     ///< the files the worker named

  attempt(const std::string& dir, const std::string& name, bool checkpoints = true) {
    env.work_dir = dir + "/work/" + name;
    env.output_path = dir + "/out/" + name + ".latent";
    env.devices = {"0"};
    env.vendor = "nvidia";
    env.timeout_s = 60;
    env.cancel = &cancel;
    env.preempt = &preempt;
    env.progress = [this](uint32_t i, uint32_t) {
      std::lock_guard<std::mutex> l(m);
      steps.push_back(i);
    };
    if (!checkpoints)
      return;
    env.checkpoint_dir = env.work_dir + "/checkpoints";
    env.checkpoint_interval_s = 0;  // by steps only (PURE_EVERY)
    fs::create_directories(env.checkpoint_dir);
    fs::create_directories(dir + "/store");
    env.checkpoint = [this, dir, name](uint32_t step, uint32_t, const std::string& file) {
      std::lock_guard<std::mutex> l(m);
      files.push_back(file);
      const std::string to = dir + "/store/" + name + "-" + std::to_string(step);
      fs::rename(file, to);
      saved.push_back(step);
      stored.push_back(to);
      return true;
    };
  }

  std::size_t progress_seen() {
    std::lock_guard<std::mutex> l(m);
    return steps.size();
  }
};

/// Waits (up to 30 s) until `a` reported at least `n` steps.
bool wait_steps(attempt& a, std::size_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (a.progress_seen() < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return a.progress_seen() >= n;
}

} // namespace

TEST_CASE("worker: checkpoints handed over, a cancelled request resumed from one, same latent",
          "[worker][checkpoint]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({pure_backend(dir.path()), "k", "pool_x"});

  attempt whole(dir.path(), "a1", false);
  auto r = s->sample(job(), "", whole.env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(whole.saved.empty());  // no folder: the worker saves none
  const std::string expected = read_file(whole.env.output_path);

  // Checkpoints after steps 3 and 6, each a file of the request's folder; cancelled after
  // step 7 (the worker keeps running: the next request is warm).
  attempt lost(dir.path(), "a2");
  std::thread stopper([&] {
    if (wait_steps(lost, 7))
      lost.cancel = true;
  });
  r = s->sample(job(), "", lost.env);
  stopper.join();
  CHECK(r.outcome == "transient");
  CHECK(r.error == "cancelled");
  REQUIRE(lost.saved.size() >= 2);
  CHECK(lost.saved[0] == 3);
  CHECK(lost.saved[1] == 6);
  for (auto& f : lost.files)
    CHECK(f.rfind(lost.env.checkpoint_dir + "/", 0) == 0);

  attempt resumed(dir.path(), "a3");
  resumed.env.resume_step = 6;
  resumed.env.resume_file = lost.stored[1];
  resumed.env.resume_sha256 = to_hex(sha256_of(read_file(lost.stored[1])));
  r = s->sample(job(), "", resumed.env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK_FALSE(r.cold);
  REQUIRE_FALSE(resumed.steps.empty());
  CHECK(resumed.steps.front() == 7);  // only the steps after the checkpoint
  CHECK(resumed.steps.back() == 12);
  CHECK(resumed.saved == std::vector<uint32_t>{9});
  CHECK(read_file(resumed.env.output_path) == expected);

  // A checkpoint that does not hash to its digest is refused before any step.
  attempt bad(dir.path(), "a4");
  bad.env.resume_step = 6;
  bad.env.resume_file = lost.stored[1];
  bad.env.resume_sha256 = std::string(64, '0');
  r = s->sample(job(), "", bad.env);
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("does not hash") != std::string::npos);
  CHECK(bad.steps.empty());
}

TEST_CASE("worker: asked to make way, it saves at its next step and ends preempted",
          "[worker][checkpoint]") {
  temp_dir dir;
  auto s = worker::make_worker_sampler({pure_backend(dir.path()), "k", "pool_x"});
  attempt a(dir.path(), "p1");
  std::thread asker([&] {
    if (wait_steps(a, 1))
      a.preempt = true;
  });
  auto r = s->sample(job(), "", a.env);
  asker.join();
  INFO(r.error);
  CHECK(r.outcome == msg::outcome::preempted);
  CHECK_FALSE(fs::exists(a.env.output_path));
  REQUIRE_FALSE(a.saved.empty());
  REQUIRE_FALSE(a.steps.empty());
  // The last checkpoint is the state after the last step it ran, short of the end.
  CHECK(a.saved.back() == a.steps.back());
  CHECK(a.saved.back() < 12);

  // The worker serves on: the next request runs whole.
  attempt next(dir.path(), "p2");
  r = s->sample(job(), "", next.env);
  CHECK(r.outcome == "ok");
}

TEST_CASE("worker: a checkpoint named outside the request's folder is refused",
          "[worker][checkpoint]") {
  temp_dir dir;
  const std::string foreign = dir.path() + "/elsewhere.ckpt";
  std::ofstream(foreign) << "not the request's";
  auto s = worker::make_worker_sampler(
    {pure_backend(dir.path(), {{"PURE_FOREIGN_CHECKPOINT", foreign}}), "k", "pool_x"});
  attempt a(dir.path(), "f1");
  auto r = s->sample(job(), "", a.env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(a.saved == std::vector<uint32_t>{3, 6, 9});  // its own only
  CHECK(fs::exists(foreign));
}
