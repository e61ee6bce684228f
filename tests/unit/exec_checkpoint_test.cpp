// The exec backend's checkpoints (backends/exec/checkpoint_watch.*): the watcher hands each
// `<step>.ckpt` a sample command renames into {checkpoint_dir} to the pool, oldest first,
// ignores the command's temporaries, removes steps no newer than the last one handed over,
// keeps one the pool could not store for the next look, and takes those written just
// before the command ended; a real child process (tests/support/programs/checkpoint_stage.sh)
// crashes after a checkpoint and a second run resumes from it through {resume_step} and
// {resume_file}, ending with the uninterrupted run's latent byte for byte.

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/exec/checkpoint_watch.hpp"
#include "backends/exec/exec_backend.hpp"
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

const std::string stage_program =
  std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/checkpoint_stage.sh";

/// What the pool's side saw: each checkpoint handed over, moved out of the folder into
/// `store` as the pool moves it into its latent store.
struct handed {
  std::string store;
  std::mutex m;
  std::vector<uint32_t> steps;
  std::vector<std::string> kept;  ///< the stored copies, in the order handed over
  int refuse = 0;                 ///< refuse this many hand-overs first (a full disk)

  bool take(uint32_t step, const std::string& file) {
    std::lock_guard<std::mutex> l(m);
    if (refuse > 0) {
      --refuse;
      return false;
    }
    const std::string to = store + "/" + std::to_string(step) + ".stored";
    fs::rename(file, to);
    steps.push_back(step);
    kept.push_back(to);
    return true;
  }
};

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

stage_env checkpointing_env(const temp_dir& dir, handed& h, const std::string& attempt) {
  stage_env e;
  e.work_dir = dir.path() + "/data/work/" + attempt;
  e.checkpoint_dir = e.work_dir + "/checkpoints";
  fs::create_directories(e.checkpoint_dir);
  e.output_path = e.work_dir + "/latent";
  e.devices = {"0"};
  e.vendor = "nvidia";
  e.timeout_s = 60;
  e.checkpoint_interval_s = 1;
  h.store = dir.path() + "/store";
  fs::create_directories(h.store);
  e.checkpoint = [&h](uint32_t step, uint32_t, const std::string& file) {
    return h.take(step, file);
  };
  return e;
}

std::unique_ptr<sampler_backend> checkpoint_sampler(const std::string& crash_after) {
  config::backend b;
  b.name = "runner";
  b.type = "exec";
  b.options = {{"sample",
                {{"argv", {stage_program, "{output}", "{checkpoint_dir}", "{resume_step}",
                           "{resume_file}", "10", "3", crash_after}}}},
               {"kill_grace_s", 0.3}};
  return exec::make_exec_sampler({b, "t10x4", "pool_x"});
}

msg::job_spec job() {
  msg::job_spec j;
  j.run_id = "run-1";
  j.index = 0;
  j.seed = 7;
  j.width = 16;
  j.height = 16;
  j.seconds = 1;
  j.prompt = "a fox";
  j.prompt_sha256 = to_hex(sha256_of(j.prompt));
  return j;
}

} // namespace

TEST_CASE("checkpoint watch: <step>.ckpt files handed over oldest first, the rest left alone",
          "[exec][checkpoint]") {
  temp_dir dir;
  handed h;
  auto env = checkpointing_env(dir, h, "1");
  const auto& d = env.checkpoint_dir;
  {
    exec::checkpoint_watch w(env);
    w.stop();  // the watcher thread is not needed: look() is driven by hand below
    write(d + "/.saving", "partial");
    write(d + "/6.ckpt.tmp", "partial");
    write(d + "/notes.txt", "not a checkpoint");
    write(d + "/0.ckpt", "step 0 saves nothing");
    write(d + "/6.ckpt", "six");
    write(d + "/3.ckpt", "three");
    w.look();
    CHECK(h.steps == std::vector<uint32_t>{3, 6});
    CHECK(read_file(h.kept[0]) == "three");
    CHECK(read_file(h.kept[1]) == "six");
    // The command's own files stay.
    CHECK(fs::exists(d + "/.saving"));
    CHECK(fs::exists(d + "/6.ckpt.tmp"));
    CHECK(fs::exists(d + "/notes.txt"));
    CHECK(fs::exists(d + "/0.ckpt"));

    // A step no newer than the last one handed over is removed, never handed over.
    write(d + "/5.ckpt", "five, late");
    write(d + "/6.ckpt", "six again");
    w.look();
    CHECK(h.steps == std::vector<uint32_t>{3, 6});
    CHECK_FALSE(fs::exists(d + "/5.ckpt"));
    CHECK_FALSE(fs::exists(d + "/6.ckpt"));

    // One the pool could not store stays for the next look.
    h.refuse = 1;
    write(d + "/9.ckpt", "nine");
    w.look();
    CHECK(h.steps == std::vector<uint32_t>{3, 6});
    CHECK(fs::exists(d + "/9.ckpt"));
    w.look();
    CHECK(h.steps == std::vector<uint32_t>{3, 6, 9});
    CHECK_FALSE(fs::exists(d + "/9.ckpt"));
  }
}

TEST_CASE("checkpoint watch: a resumed attempt hands over only steps after its resume point",
          "[exec][checkpoint]") {
  temp_dir dir;
  handed h;
  auto env = checkpointing_env(dir, h, "2");
  env.resume_step = 6;
  exec::checkpoint_watch w(env);
  write(env.checkpoint_dir + "/6.ckpt", "six");
  write(env.checkpoint_dir + "/9.ckpt", "nine");
  w.stop();  // the last look takes what the command left
  CHECK(h.steps == std::vector<uint32_t>{9});
  CHECK_FALSE(fs::exists(env.checkpoint_dir + "/6.ckpt"));
}

TEST_CASE("checkpoint watch: no folder, or no one to hand over to, watches nothing",
          "[exec][checkpoint]") {
  temp_dir dir;
  handed h;
  auto env = checkpointing_env(dir, h, "3");
  write(env.checkpoint_dir + "/3.ckpt", "three");
  auto no_taker = env;
  no_taker.checkpoint = nullptr;
  {
    exec::checkpoint_watch w(no_taker);
    w.look();
  }
  auto no_dir = env;
  no_dir.checkpoint_dir.clear();
  {
    exec::checkpoint_watch w(no_dir);
    w.look();
  }
  CHECK(h.steps.empty());
  CHECK(fs::exists(env.checkpoint_dir + "/3.ckpt"));
}

TEST_CASE("exec: a command that crashes after a checkpoint is resumed from it, same latent",
          "[exec][checkpoint]") {
  temp_dir dir;
  // Uninterrupted, no checkpoint folder: {checkpoint_dir} and {resume_file} are empty,
  // {resume_step} is 0.
  handed whole_h;
  auto whole = checkpointing_env(dir, whole_h, "10");
  whole.checkpoint_dir.clear();
  auto r = checkpoint_sampler("0")->sample(job(), "", whole);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(whole_h.steps.empty());
  const std::string expected = read_file(whole.output_path);
  CHECK(expected.find("step 10\n") != std::string::npos);

  // Crashes right after step 7: the checkpoints after steps 3 and 6 were handed over while
  // it ran (or by the last look).
  handed h;
  auto lost = checkpointing_env(dir, h, "11");
  r = checkpoint_sampler("7")->sample(job(), "", lost);
  CHECK(r.outcome == "transient");
  CHECK_FALSE(fs::exists(lost.output_path));
  REQUIRE(h.steps == std::vector<uint32_t>{3, 6});

  // The next attempt goes on from step 6.
  handed h2;
  auto resumed = checkpointing_env(dir, h2, "12");
  h2.store = dir.path() + "/store2";
  fs::create_directories(h2.store);
  resumed.resume_step = 6;
  resumed.resume_file = h.kept[1];
  resumed.resume_sha256 = to_hex(sha256_of(read_file(h.kept[1])));
  r = checkpoint_sampler("0")->sample(job(), "", resumed);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(read_file(resumed.output_path) == expected);
  CHECK(r.sha256 == to_hex(sha256_of(expected)));
  CHECK(h2.steps == std::vector<uint32_t>{9});  // its own checkpoint, after the resume point
  const auto out = read_file(dir.path() + "/data/logs/backends/pool_x/run-1-0-sample-12.stdout.log");
  CHECK(out.find("from 6") != std::string::npos);
}
