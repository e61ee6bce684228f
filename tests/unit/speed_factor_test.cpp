// Live refinement: the coordinator folds the sampling times its pools' results
// show into a speed factor per pool, and the auto policy plans with it, so a pool that runs
// slower than its profile (a hot RX 7900 XTX) gets fewer of the remaining jobs.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/coordinator/policy.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/planner/line_sim.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;

namespace {

/// What the profile says of both kinds: cold 15, warm 10; conditioning 0, handoff 1,
/// decode 4. The two pools are identical to the policy.
class profile_estimates : public actors::coordinator::stage_estimates {
public:
  std::optional<double> sampling(const std::string&, const msg::job_spec&,
                                 bool cold) const override {
    return cold ? 15.0 : 10.0;
  }
  double conditioning(const std::string&) const override { return 0; }
  double handoff(const std::string&, const actors::coordinator::decoder_view&,
                 const msg::job_spec&) const override {
    return 1;
  }
  double decode(const actors::coordinator::decoder_view&, const msg::job_spec&) const override { return 4; }
};

/// The auto policy that does not learn: no estimate to measure a pool against, so every
/// speed factor stays 1 (what the coordinator did before it observed).
class blind_auto : public actors::coordinator::auto_policy {
public:
  using actors::coordinator::auto_policy::auto_policy;
  std::optional<double> expected_sampling(const std::string&, const msg::job_spec&,
                                          bool) const override {
    return std::nullopt;
  }
};

actors::coordinator::state two_pools() { return sched_fixtures::two_pools_one_decoder(); }

actors::coordinator::run make_run(const std::string& id, uint32_t count) {
  return sched_fixtures::run_of(id, count);
}

/// The real line: k1 runs as profiled, k2 (hot) takes twice as long, cold and warm.
actors::planner::timing real_times() {
  actors::planner::timing t;
  t.sample = [](const std::string& kind, const msg::job_spec&, bool cold) {
    double s = cold ? 15 : 10;
    return actors::planner::sample_time{kind == "k2" ? 2 * s : s, false};
  };
  t.conditioning = [](const std::string&) { return 0.0; };
  t.handoff = [](const std::string&, uint64_t) { return 1.0; };
  t.decode = [](const std::string&, const msg::job_spec&) { return 4.0; };
  t.latent_bytes = [](const msg::job_spec&) { return uint64_t{13000000}; };
  return t;
}

std::map<std::string, uint32_t> jobs_per_pool(const actors::planner::result& r) {
  std::map<std::string, uint32_t> n;
  for (auto& j : r.run.jobs)
    ++n[j.pool];
  return n;
}

} // namespace

TEST_CASE("a pool observed 2x slower than its estimate gets fewer of the remaining jobs") {
  // The profile says a1 and a2 sample alike (cold 15, warm 10); a2 really takes 30 / 20.
  // Blind, auto hands a2 a job whenever it is free: a1 finishes at 15, 25, .. 75 (7 jobs),
  // a2 at 30, 50, 70, 90 (4), the last video at 95. Observing, a2's results (stamped
  // 20 s of sampling against 10 expected, its first one from t = 0 unstamped) bring its
  // factor to 1.5 at 50 and 1.75 at 70; at 70 it would finish the 11th job at 70 + 17.5 + 5
  // = 92.5, after a1's 85 + 5 = 90 (as it would in fact: 95): a2 stays idle, a1 takes it.
  const uint32_t N = 11;
  auto est = std::make_shared<profile_estimates>();

  auto blind = two_pools();
  blind.mode_policy["m"] = std::make_shared<blind_auto>(est);
  auto before = actors::planner::simulate(blind, make_run("r1", N), real_times());
  REQUIRE(before.finished);
  REQUIRE(before.violations.empty());

  auto seeing = two_pools();
  seeing.mode_policy["m"] = actors::coordinator::make_policy("auto", est);
  auto after = actors::planner::simulate(seeing, make_run("r1", N), real_times());
  REQUIRE(after.finished);
  REQUIRE(after.violations.empty());

  auto b = jobs_per_pool(before), a = jobs_per_pool(after);
  INFO("blind: a1 " << b["a1"] << " a2 " << b["a2"] << "; observing: a1 " << a["a1"] << " a2 "
                    << a["a2"] << "; makespans " << actors::coordinator::summarize(before.run).makespan_s
                    << " / " << actors::coordinator::summarize(after.run).makespan_s);
  CHECK(b["a1"] == 7);
  CHECK(b["a2"] == 4);
  CHECK(actors::coordinator::summarize(before.run).makespan_s == Approx(95));
  CHECK(a["a1"] == 8);
  CHECK(a["a2"] == 3);
  CHECK(actors::coordinator::summarize(after.run).makespan_s == Approx(90));

  // The same over longer batches: the slow pool never gets more than blind, and at every
  // batch end where the two differ it gets fewer and the batch ends sooner.
  int differed = 0;
  for (uint32_t n = 4; n <= 24; ++n) {
    auto x = actors::planner::simulate(blind, make_run("r1", n), real_times());
    auto y = actors::planner::simulate(seeing, make_run("r1", n), real_times());
    REQUIRE(x.finished);
    REQUIRE(y.finished);
    auto bx = jobs_per_pool(x), by = jobs_per_pool(y);
    INFO("n " << n);
    CHECK(by["a2"] <= bx["a2"]);
    CHECK(actors::coordinator::summarize(y.run).makespan_s <= actors::coordinator::summarize(x.run).makespan_s + 1e-9);
    if (by["a2"] < bx["a2"]) {
      ++differed;
      CHECK(actors::coordinator::summarize(y.run).makespan_s < actors::coordinator::summarize(x.run).makespan_s);
    }
  }
  CHECK(differed >= 4);
}

namespace {

msg::pool_status report(const std::string& pool, uint64_t epoch, uint64_t seq) {
  return sched_fixtures::pool_report(pool, epoch, seq);
}

/// The ok result of the attempt `pool` runs now: its sampler ran [start, end] (run clock,
/// time_scale 1: unix seconds).
msg::sample_result ok_result(const actors::coordinator::state& s, const std::string& pool, double start,
                             double end, bool cold) {
  const auto& p = s.pools.at(pool);
  REQUIRE(p.assigned);
  msg::sample_result r;
  r.pool = pool;
  r.host = "a";
  r.run_id = p.assigned->first;
  r.index = p.assigned->second;
  r.attempt = 0;
  for (auto& run : s.runs)
    if (run.id == r.run_id)
      r.attempt = run.jobs[r.index].attempt;
  r.outcome = msg::outcome::ok;
  r.latent_sha256 = std::string(64, 'a');
  r.latent_bytes = 1000;
  r.cold = cold;
  r.sampling_s = end - start;
  r.start_unix_s = start;
  r.sampling_start_unix_s = start;
  r.end_unix_s = end;
  return r;
}

} // namespace

TEST_CASE("the speed factor: a weighted mean of observed / estimated, clamped, reset on restart") {
  auto s = two_pools();
  s.p.lease_s = 1e6;
  s.mode_policy["m"] = actors::coordinator::make_policy("auto", std::make_shared<profile_estimates>());
  double t = 1000;  // stamps > 0: a stamp of 0 means "not stamped"
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("a1", 1, 1)}, t);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("a2", 1, 1)}, t);
  actors::coordinator::step(s, actors::coordinator::ev_submit{make_run("r1", 40)}, t);
  auto& a2 = s.pools.at("a2");
  CHECK(a2.speed_factor == 1);

  // Cold: 30 s against 15 -> ratio 2: 0.5 * 2 + 0.5 * 1 = 1.5.
  REQUIRE(a2.assigned);
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{ok_result(s, "a2", t, t + 30, true)}, t + 30);
  t += 30;
  CHECK(a2.speed_factor == Approx(1.5));
  CHECK(a2.speed_observed == 1);
  // Warm: 20 s against 10 -> 1.75, then 1.875.
  REQUIRE(a2.assigned);
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{ok_result(s, "a2", t, t + 20, false)}, t + 20);
  t += 20;
  CHECK(a2.speed_factor == Approx(1.75));
  REQUIRE(a2.assigned);
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{ok_result(s, "a2", t, t + 20, false)}, t + 20);
  t += 20;
  CHECK(a2.speed_factor == Approx(1.875));
  // A result without a sampler start stamp tells nothing.
  REQUIRE(a2.assigned);
  auto unstamped = ok_result(s, "a2", t, t + 500, false);
  unstamped.sampling_start_unix_s = 0;
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{unstamped}, t + 500);
  t += 500;
  CHECK(a2.speed_factor == Approx(1.875));
  CHECK(a2.speed_observed == 3);
  // An absurd one (1000 s against 10) is clamped at 5: 0.5 * 5 + 0.5 * 1.875.
  REQUIRE(a2.assigned);
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{ok_result(s, "a2", t, t + 1000, false)}, t + 1000);
  t += 1000;
  CHECK(a2.speed_factor == Approx(3.4375));
  // a1 was not observed: still as estimated.
  CHECK(s.pools.at("a1").speed_factor == 1);

  // status @cluster shows it.
  auto cluster = actors::coordinator::cluster_json(s);
  CHECK(cluster["pools"]["a2"]["speed_factor"].get<double>() == Approx(3.4375));
  CHECK(cluster["pools"]["a1"]["speed_factor"].get<double>() == 1);

  // Another report of the same epoch changes nothing; a new epoch starts afresh.
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("a2", 1, 2)}, t);
  CHECK(a2.speed_factor == Approx(3.4375));
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("a2", 2, 1)}, t + 1);
  CHECK(a2.speed_factor == 1);
  CHECK(a2.speed_observed == 0);
  CHECK(s.pools.at("a2").speed_factor == 1);
}
