// The pool machine's progress watchdog: a sampler that reports its steps and goes silent
// for stall_s is stopped and its attempt ends transient ("stalled"), so the job resumes from
// its newest checkpoint; a slow but stepping sampler, a backend that never reports steps and
// a watchdog that is off are left to the stage timeout. The sim sampler, as a pool makes it,
// says it reports its steps, as many as its option `steps` asks.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "actors/pool/pool_machine.hpp"
#include "backends/backend.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;

namespace {

bool cancels(const std::vector<actors::pool::effect>& fx, uint64_t attempt) {
  return std::any_of(fx.begin(), fx.end(), [&](const actors::pool::effect& e) {
    auto* c = std::get_if<actors::pool::fx_cancel_stage>(&e);
    return c != nullptr && c->attempt == attempt;
  });
}

/// A pool with the watchdog at `stall_s`, sampling attempt `attempt` (workflow `flow`)
/// since run-clock second 10.
actors::pool::state sampling(double stall_s, bool steps_expected, uint64_t attempt,
                        const std::string& flow = "t2v") {
  actors::pool::state p;
  p.pool = "p0";
  p.host = "a";
  p.stall_s = stall_s;
  p.steps_expected = steps_expected;
  msg::sample_order o;
  o.pool = "p0";
  o.attempt = attempt;
  o.job.run_id = "r1";
  o.job.index = 3;
  o.job.workflow = flow;
  actors::pool::step(p, actors::pool::ev_order{o}, 0);
  actors::pool::step(p, actors::pool::ev_conditioned{attempt, true, "/c", 0, ""}, 10);
  return p;
}

/// The sampler's call returns as a cancel makes it.
void returns_cancelled(actors::pool::state& p, uint64_t attempt, double now) {
  actors::pool::ev_sampled d;
  d.attempt = attempt;
  d.outcome = msg::outcome::transient;
  d.error = "cancelled";
  actors::pool::step(p, d, now);
}

} // namespace

TEST_CASE("pool watchdog: a sampler silent for stall_s is stopped, its attempt transient") {
  SECTION("hung before its first step: counted from the sampler's start") {
    auto p = sampling(100, true, 7);
    CHECK_FALSE(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 109.9), 7));
    auto fx = actors::pool::step(p, actors::pool::ev_progress{7, 0}, 110);
    CHECK(cancels(fx, 7));
    CHECK(p.stalled);
    CHECK(p.stalls == 1);
    // Asked once: later looks while the call winds down ask nothing more.
    CHECK(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 111).empty());
    returns_cancelled(p, 7, 112);
    REQUIRE(p.unacked.size() == 1);
    CHECK(p.unacked[0].outcome == msg::outcome::transient);
    CHECK(p.unacked[0].error.find("stalled: no step in 100 s (after step 0)") == 0);
    CHECK(p.current == std::nullopt);
    CHECK_FALSE(p.stalled);  // the next attempt starts unmarked
  }
  SECTION("hung after some steps: counted from the newest step") {
    auto p = sampling(100, true, 7);
    actors::pool::step(p, actors::pool::ev_progress{7, 1}, 50);
    actors::pool::step(p, actors::pool::ev_progress{7, 2}, 90);
    CHECK_FALSE(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 2}, 189), 7));
    CHECK(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 2}, 190), 7));
    returns_cancelled(p, 7, 191);
    REQUIRE(p.unacked.size() == 1);
    CHECK(p.unacked[0].error.find("after step 2") != std::string::npos);
  }
  SECTION("a latent made as the stop was asked is kept: the race is the sampler's") {
    auto p = sampling(100, true, 7);
    CHECK(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 110), 7));
    actors::pool::ev_sampled d;
    d.attempt = 7;
    d.outcome = msg::outcome::ok;
    d.sha256 = std::string(64, 'a');
    d.staged = "/w/7/latent";
    d.mono_s = 0;
    p.lease_until = 5;
    actors::pool::step(p, d, 111);
    REQUIRE(p.unacked.size() == 1);
    CHECK(p.unacked[0].outcome == msg::outcome::ok);
  }
}

TEST_CASE("pool watchdog: what it leaves alone") {
  SECTION("slow steps, each within stall_s") {
    auto p = sampling(100, true, 7);
    for (uint32_t k = 1; k <= 10; ++k)
      CHECK_FALSE(cancels(actors::pool::step(p, actors::pool::ev_progress{7, k}, 10 + 99.0 * k), 7));
    CHECK_FALSE(p.stalled);
  }
  SECTION("off") {
    auto p = sampling(0, true, 7);
    CHECK_FALSE(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 1e6), 7));
  }
  SECTION("a backend that may not report steps: only workflows seen stepping are watched") {
    auto p = sampling(100, false, 7);
    CHECK_FALSE(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 1e5), 7));
    actors::pool::step(p, actors::pool::ev_progress{7, 1}, 1e5 + 1);  // t2v reports steps
    CHECK(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 1}, 1e5 + 101), 7));
    returns_cancelled(p, 7, 1e5 + 102);
    // A later t2v attempt is watched from its start; an i2v one, never seen stepping, not.
    msg::sample_order o;
    o.pool = "p0";
    o.attempt = 8;
    o.job.workflow = "i2v";
    actors::pool::step(p, actors::pool::ev_order{o}, 2e5);
    actors::pool::step(p, actors::pool::ev_conditioned{8, true, "/c", 0, ""}, 2e5);
    CHECK_FALSE(cancels(actors::pool::step(p, actors::pool::ev_progress{8, 0}, 3e5), 8));
    returns_cancelled(p, 8, 3e5);  // (as if the user cancelled it)
    o.attempt = 9;
    o.job.workflow = "t2v";
    actors::pool::step(p, actors::pool::ev_order{o}, 4e5);
    actors::pool::step(p, actors::pool::ev_conditioned{9, true, "/c", 0, ""}, 4e5);
    CHECK(cancels(actors::pool::step(p, actors::pool::ev_progress{9, 0}, 4e5 + 100), 9));
  }
  SECTION("conditioning, another attempt's progress, idle") {
    actors::pool::state p;
    p.stall_s = 100;
    p.steps_expected = true;
    msg::sample_order o;
    o.attempt = 7;
    actors::pool::step(p, actors::pool::ev_order{o}, 0);
    CHECK(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 500).empty());  // still conditioning
    actors::pool::step(p, actors::pool::ev_conditioned{7, true, "/c", 0, ""}, 500);
    CHECK(actors::pool::step(p, actors::pool::ev_progress{6, 0}, 700).empty());
    CHECK(cancels(actors::pool::step(p, actors::pool::ev_progress{7, 0}, 600), 7));
  }
}

TEST_CASE("sim sampler as a pool makes it: reports its steps, as many as option steps says") {
  testing_support::temp_dir dir;
  config::backend b;
  b.name = "sim";
  b.type = "sim";
  b.time_scale = 0.0001;
  b.options = {{"steps", 6}};
  auto sampler = backends::make_sampler({b, "t10x4", "four_a", "host_a", {"g0"}});
  CHECK(sampler->reports_steps());
  msg::job_spec job;
  job.seed = 5;
  job.width = 416;
  job.height = 736;
  job.seconds = 5;
  backends::stage_env env;
  env.output_path = dir.path() + "/latent";
  env.timeout_s = 3600;
  std::vector<uint32_t> seen;
  env.progress = [&](uint32_t step, uint32_t steps) {
    CHECK(steps == 6);
    seen.push_back(step);
  };
  auto r = sampler->sample(job, "", env);
  REQUIRE(r.outcome == msg::outcome::ok);
  CHECK(seen == std::vector<uint32_t>{1, 2, 3, 4, 5, 6});

  for (auto bad : {nlohmann::json{{"steps", 0}}, nlohmann::json{{"steps", 2.5}},
                   nlohmann::json{{"stepz", 6}}}) {
    b.options = bad;
    INFO(bad.dump());
    CHECK_THROWS_WITH(backends::make_sampler({b, "t10x4", "four_a", "host_a", {"g0"}}),
                      Catch::Contains("backend 'sim'") && Catch::Contains("step"));
  }
}
