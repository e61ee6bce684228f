// The sim sampler's checkpoints (docs/sim-contract.md, "Checkpoints"): saved at the first
// step boundary checkpoint_interval_s after the last one, at once when asked to make way
// (outcome "preempted"); a resumed attempt runs only the steps after its checkpoint and
// makes the uninterrupted attempt's latent; a checkpoint of another job is not resumed.
// On a zero time scale: the stage times are the virtual ones, exactly.

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/backend.hpp"
#include "backends/sim/checkpoint.hpp"
#include "backends/sim/sim_backend.hpp"
#include "common/files.hpp"

namespace {

namespace fs = std::filesystem;
using namespace vidline;
using namespace vidline::backends;
using namespace vidline::backends::sim;

struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("vidline-simck-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(path / "ck");
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

profile small_profile() {
  auto j = nlohmann::json::parse(std::string(profile::reference_json()));
  j["latent"]["bytes"] = 4160;
  return profile::from_json(j);
}

msg::job_spec job(uint64_t seed) {
  msg::job_spec j;
  j.run_id = "r1";
  j.seed = seed;
  j.width = 416;
  j.height = 736;
  j.seconds = 5;
  j.prompt = "a lighthouse in a storm";
  j.workflow = "default";
  return j;
}

/// Saved checkpoints, each kept under a name of its own (as the pool moves them away).
struct saved {
  std::vector<uint32_t> steps;
  std::vector<std::string> files;
};

stage_env env_for(const temp_dir& d, const std::string& out, saved& s, double interval) {
  stage_env e;
  e.output_path = d / out;
  e.vendor = "nvidia";
  e.checkpoint_dir = d / "ck";
  e.checkpoint_interval_s = interval;
  e.checkpoint = [&s, &d](uint32_t step, uint32_t steps, const std::string& file) {
    CHECK(steps == sim_steps);
    const std::string kept = d / ("kept-" + std::to_string(step));
    fs::rename(file, kept);
    s.steps.push_back(step);
    s.files.push_back(kept);
    return true;
  };
  return e;
}

} // namespace

TEST_CASE("sim checkpoints: at the interval, a resume runs the steps after it and makes the "
          "same latent") {
  temp_dir d;
  auto prof = small_profile();
  auto sampler = make_sim_sampler(prof, {0, "t10x8", "pool-a"});
  const auto j = job(4242);
  const double warm = prof.sampling("t10x8", {416, 736, 5}, model_state::warm).s;
  const double step = warm / sim_steps;

  saved s;
  auto first = sampler->sample(j, "", env_for(d, "a.latent", s, 3 * step));
  REQUIRE(first.outcome == msg::outcome::ok);
  // Steps 3, 6, ..., 27 (none after the last step: the latent follows).
  REQUIRE(s.steps.size() == 9);
  CHECK(s.steps.front() == 3);
  CHECK(s.steps.back() == 27);

  saved none;
  auto warm_run = sampler->sample(j, "", env_for(d, "b.latent", none, 0));
  REQUIRE(warm_run.outcome == msg::outcome::ok);
  CHECK(none.steps.empty());  // interval 0: none
  CHECK(warm_run.elapsed_s == Approx(warm));

  saved more;
  auto env = env_for(d, "c.latent", more, 3 * step);
  env.resume_step = 27;
  env.resume_file = s.files.back();
  auto resumed = sampler->sample(j, "", env);
  REQUIRE(resumed.outcome == msg::outcome::ok);
  CHECK(resumed.sha256 == first.sha256);
  CHECK(files::read_all(d / "c.latent") == files::read_all(d / "a.latent"));
  CHECK(resumed.elapsed_s == Approx(3 * step));  // the last three steps only
  CHECK(more.steps.empty());

  // A checkpoint of another job (or another step than the order says) is not resumed from.
  saved other;
  auto j2 = job(7);
  auto other_first = sampler->sample(j2, "", env_for(d, "d.latent", other, 3 * step));
  REQUIRE(other_first.outcome == msg::outcome::ok);
  saved x;
  auto wrong = env_for(d, "e.latent", x, 0);
  wrong.resume_step = 27;
  wrong.resume_file = other.files.back();
  auto r = sampler->sample(j, "", wrong);
  REQUIRE(r.outcome == msg::outcome::ok);
  CHECK(r.sha256 == first.sha256);
  CHECK(r.elapsed_s == Approx(warm));  // from step 0
  CHECK_FALSE(checkpoint_step({j.seed, 416, 736, 5, {}}, sim_steps,
                              files::read_all(s.files.back())));
}

TEST_CASE("sim checkpoints: asked to make way, it saves at the next step and stops") {
  temp_dir d;
  auto prof = small_profile();
  auto sampler = make_sim_sampler(prof, {0, "t10x4", "pool-b"});
  const auto j = job(99);
  std::atomic<bool> preempt{true};
  saved s;
  auto env = env_for(d, "a.latent", s, 0);
  env.preempt = &preempt;
  env.resume_step = 0;
  auto r = sampler->sample(j, "", env);
  CHECK(r.outcome == msg::outcome::preempted);
  REQUIRE(s.steps == std::vector<uint32_t>{1});
  CHECK_FALSE(fs::exists(d / "a.latent"));
  // Resumed from it: the same latent as one never stopped.
  saved t;
  auto go_on = env_for(d, "b.latent", t, 0);
  go_on.resume_step = 1;
  go_on.resume_file = s.files.back();
  auto done = sampler->sample(j, "", go_on);
  REQUIRE(done.outcome == msg::outcome::ok);
  auto whole = sampler->sample(j, "", env_for(d, "c.latent", t, 0));
  CHECK(done.sha256 == whole.sha256);
}
