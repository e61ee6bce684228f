// The coordinator's scheduler on virtual time, alone and inside a whole simulated line
// (the seeded simulation under faults is tests/sim/scheduler_sim_test.cpp).
#include <catch2/catch.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "actors/planner/line_sim.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;

using namespace sched_fixtures;

namespace {

actors::coordinator::run make_run(uint32_t count, uint32_t w = 416, uint32_t h = 736, uint32_t secs = 5) {
  return run_of("r1", count, 0, w, h, secs);
}

msg::pool_status pool_report(const std::string& pool, uint64_t epoch) {
  return sched_fixtures::pool_report(pool, epoch, 1);
}

} // namespace

TEST_CASE("a hand-computed schedule: two pools in turn, one decoder, pending at most one") {
  auto res = actors::planner::simulate(two_pools_one_decoder(), make_run(3), simple_timing());
  REQUIRE(res.violations.empty());
  REQUIRE(res.finished);
  auto& jobs = res.run.jobs;
  // job 0 -> a1 [0,15], job 1 -> a2 [0,15] (cold), job 2 -> a1 (first free) [15,25] warm.
  CHECK(jobs[0].pool == "a1");
  CHECK(jobs[1].pool == "a2");
  CHECK(jobs[2].pool == "a1");
  CHECK(jobs[0].sample_end == Approx(15));
  CHECK(jobs[2].sample_end == Approx(25));
  // Decode: job 0 handoff [15,16] decode [16,20]; job 1 fetched [15,16] waits, decode
  // [20,24]; job 2 handoff [25,26] decode [26,30].
  CHECK(jobs[0].decode_end == Approx(20));
  CHECK(jobs[1].decode_end == Approx(24));
  CHECK(jobs[2].decode_end == Approx(30));
  auto sum = actors::coordinator::summarize(res.run);
  CHECK(sum.succeeded == 3);
  CHECK(sum.first_finish_s == Approx(20));
  CHECK(sum.makespan_s == Approx(30));
  CHECK(sum.clips_per_hour == Approx(3 * 3600.0 / 30));
}

TEST_CASE("the decoder never gets more than its credits while pools outrun it") {
  auto t = simple_timing();
  t.decode = [](const std::string&, const msg::job_spec&) { return 30.0; };  // slow decoder
  auto res = actors::planner::simulate(two_pools_one_decoder(), make_run(12), t);
  REQUIRE(res.violations.empty());
  REQUIRE(res.finished);
  // Decodes are back to back: makespan = first latent ready (16) + 12 x 30.
  CHECK(actors::coordinator::summarize(res.run).makespan_s == Approx(16 + 12 * 30.0));
}

TEST_CASE("a job that runs out of memory on one pool kind moves to another, never back") {
  auto t = simple_timing();
  t.sample = [](const std::string& kind, const msg::job_spec&, bool) {
    return kind == "k1" ? actors::planner::sample_time{5.0, true} : actors::planner::sample_time{10.0, false};
  };
  auto res = actors::planner::simulate(two_pools_one_decoder(), make_run(2), t);
  REQUIRE(res.violations.empty());
  REQUIRE(res.finished);
  for (auto& j : res.run.jobs) {
    CHECK(j.state == actors::coordinator::job_state::succeeded);
    CHECK(j.pool == "a2");
    CHECK(j.capacity_failed.count("k2") == 0);
  }
  // Job 0 went to a1 first and failed there; the capacity limit is remembered.
  CHECK(res.run.jobs[0].capacity_failed.count("k1") == 1);
}

TEST_CASE("a job no pool of the mode can hold fails with a capacity reason, not a retry loop") {
  auto t = simple_timing();
  t.sample = [](const std::string&, const msg::job_spec&, bool) {
    return actors::planner::sample_time{204.389, true};
  };
  auto res = actors::planner::simulate(two_pools_one_decoder(), make_run(1), t);
  REQUIRE(res.finished);
  auto& j = res.run.jobs[0];
  CHECK(j.state == actors::coordinator::job_state::failed);
  CHECK(j.error.find("capacity") != std::string::npos);
  CHECK(j.sample_attempts == 2);  // once per pool kind, never twice on one
}

TEST_CASE("pools sharing GPUs never run at once") {
  auto s = two_pools_one_decoder();
  s.pools["a1"].conflicts = {"a2"};
  s.pools["a2"].conflicts = {"a1"};
  auto res = actors::planner::simulate(s, make_run(4), simple_timing());
  REQUIRE(res.finished);
  std::vector<actors::planner::stage_span> sampling;
  for (auto& sp : res.spans)
    if (sp.stage == "sampling")
      sampling.push_back(sp);
  for (auto& x : sampling)
    for (auto& y : sampling)
      if (x.lane != y.lane)
        CHECK((x.end <= y.start || y.end <= x.start));
}

TEST_CASE("a late result of a given-up attempt is fenced off") {
  auto s = two_pools_one_decoder();
  double now = 0;
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_report("a1", 1)}, now);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_report("a2", 1)}, now);
  actors::coordinator::step(s, actors::coordinator::ev_submit{make_run(1)}, now);
  auto* j = s.find_job("r1", 0);
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  uint64_t first = j->attempt;
  // a1 restarts (new epoch) without the job: it goes back to the queue and out again.
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_report("a1", 2)}, 1);
  REQUIRE(j->attempt != first);
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  msg::sample_result late;
  late.pool = "a1";
  late.host = "a";
  late.attempt = first;
  late.run_id = "r1";
  late.index = 0;
  late.outcome = msg::outcome::fatal;
  late.error = "late";
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{late}, 2);
  CHECK(j->state == actors::coordinator::job_state::sampling);  // unchanged
  bool acked = false;
  for (auto& e : fx)
    if (auto* a = std::get_if<actors::coordinator::fx_ack>(&e))
      acked = a->attempt == first;
  CHECK(acked);  // the pool may forget it
}

TEST_CASE("every effect that sends an order comes after the job it depends on is persisted") {
  auto s = two_pools_one_decoder();
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_report("a1", 1)}, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{make_run(1)}, 0);
  bool persisted = false;
  bool sent_after_persist = false;
  for (auto& e : fx) {
    if (std::holds_alternative<actors::coordinator::fx_persist_job>(e))
      persisted = true;
    if (std::holds_alternative<actors::coordinator::fx_send_sample>(e))
      sent_after_persist = persisted;
  }
  CHECK(sent_after_persist);
}
