// Dispatch policies against hand-computed schedules (whole line on the virtual clock), the
// capacity limits a profile gives pools, and the scheduler's index under faults.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "actors/coordinator/policy.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/planner/line_sim.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;

namespace {

actors::coordinator::run make_run(uint32_t count) { return sched_fixtures::run_of("r1", count); }

/// Stage times per pool kind: {cold, warm}; conditioning 0, handoff 1, decode 4.
struct kind_times {
  double cold, warm;
};

actors::planner::timing timing_of(std::map<std::string, kind_times> kinds) {
  actors::planner::timing t;
  t.sample = [kinds](const std::string& kind, const msg::job_spec&, bool cold) {
    auto& k = kinds.at(kind);
    return actors::planner::sample_time{cold ? k.cold : k.warm, false};
  };
  t.conditioning = [](const std::string&) { return 0.0; };
  t.handoff = [](const std::string&, uint64_t) { return 1.0; };
  t.decode = [](const std::string&, const msg::job_spec&) { return 4.0; };
  t.latent_bytes = [](const msg::job_spec&) { return uint64_t{13000000}; };
  return t;
}

/// The same numbers for the auto policy.
class fixed_estimates : public actors::coordinator::stage_estimates {
public:
  explicit fixed_estimates(std::map<std::string, kind_times> k) : kinds_(std::move(k)) {}
  std::optional<double> sampling(const std::string& kind, const msg::job_spec&,
                                 bool cold) const override {
    auto& k = kinds_.at(kind);
    return cold ? k.cold : k.warm;
  }
  double conditioning(const std::string&) const override { return 0; }
  double handoff(const std::string&, const actors::coordinator::decoder_view&,
                 const msg::job_spec&) const override {
    return 1;
  }
  double decode(const actors::coordinator::decoder_view&, const msg::job_spec&) const override { return 4; }

private:
  std::map<std::string, kind_times> kinds_;
};

void use(actors::coordinator::state& s, const std::string& policy, std::map<std::string, kind_times> kinds) {
  s.mode_policy["m"] = actors::coordinator::make_policy(policy, std::make_shared<fixed_estimates>(kinds));
  REQUIRE(s.mode_policy["m"] != nullptr);
}

double makespan(const actors::planner::result& r) { return actors::coordinator::summarize(r.run).makespan_s; }

} // namespace

TEST_CASE("in_turn: job i goes to pool i mod n and waits for it (hand-computed)") {
  // fast: 15 cold / 10 warm; slow: 35 / 30. Jobs 0, 2 -> fast [0,15] [15,25];
  // jobs 1, 3 -> slow [0,35] [35,65]. Decodes (handoff 1, decode 4): 20, 30, 40, 70.
  std::map<std::string, kind_times> kinds{{"fast", {15, 10}}, {"slow", {35, 30}}};
  auto s = line_of({{"a1", "a", "fast"}, {"a2", "a", "slow"}});
  auto res = actors::planner::simulate(s, make_run(4), timing_of(kinds));
  REQUIRE(res.finished);
  REQUIRE(res.violations.empty());
  const auto& j = res.run.jobs;
  CHECK(j[0].pool == "a1");
  CHECK(j[1].pool == "a2");
  CHECK(j[2].pool == "a1");
  CHECK(j[3].pool == "a2");
  CHECK(j[2].sample_end == Approx(25));
  CHECK(j[3].sample_end == Approx(65));
  CHECK(j[0].decode_end == Approx(20));
  CHECK(j[2].decode_end == Approx(30));
  CHECK(j[1].decode_end == Approx(40));
  CHECK(j[3].decode_end == Approx(70));
  CHECK(makespan(res) == Approx(70));
}

TEST_CASE("first_free: whichever pool is free first takes the next job (hand-computed)") {
  // Job 0 -> fast [0,15], 1 -> slow [0,35], 2 -> fast [15,25], 3 -> fast [25,35].
  // Jobs 1 and 3 are both sampled at 35: job 1's result is reported first (its timer was
  // set first), so it is decoded first: handoff [35,36] decode [36,40]; job 3 is fetched
  // meanwhile and decoded [40,44].
  std::map<std::string, kind_times> kinds{{"fast", {15, 10}}, {"slow", {35, 30}}};
  auto s = line_of({{"a1", "a", "fast"}, {"a2", "a", "slow"}});
  use(s, "first_free", kinds);
  auto res = actors::planner::simulate(s, make_run(4), timing_of(kinds));
  REQUIRE(res.finished);
  const auto& j = res.run.jobs;
  CHECK(j[0].pool == "a1");
  CHECK(j[1].pool == "a2");
  CHECK(j[2].pool == "a1");
  CHECK(j[3].pool == "a1");
  CHECK(j[3].sample_end == Approx(35));
  CHECK(j[1].decode_end == Approx(40));
  CHECK(j[3].decode_end == Approx(44));
  CHECK(makespan(res) == Approx(44));
}

TEST_CASE("auto leaves a slow pool idle when the fast one finishes the batch sooner") {
  // fast 10 s a job, slow 100 s. fast alone: sampled 10, 20, 30 -> videos 15, 25, 35.
  // Giving job 1 to the slow pool (in turn, or first free) would end at 105.
  std::map<std::string, kind_times> kinds{{"fast", {10, 10}}, {"slow", {100, 100}}};
  auto s = line_of({{"a1", "a", "fast"}, {"a2", "a", "slow"}});
  auto in_turn = actors::planner::simulate(s, make_run(3), timing_of(kinds));
  use(s, "auto", kinds);
  auto res = actors::planner::simulate(s, make_run(3), timing_of(kinds));
  REQUIRE(res.finished);
  for (auto& j : res.run.jobs)
    CHECK(j.pool == "a1");
  CHECK(makespan(res) == Approx(35));
  CHECK(makespan(in_turn) == Approx(105));
}

TEST_CASE("auto picks the layout of GPU-sharing pools by batch size, model loads included") {
  // "big" shares GPUs with "s1" and "s2". big: 20 cold / 10 warm; s1, s2: 30 / 15 each.
  std::map<std::string, kind_times> kinds{{"big", {20, 10}}, {"small", {30, 15}}};
  auto s = line_of({{"big", "a", "big"}, {"s1", "a", "small"}, {"s2", "a", "small"}});
  s.pools["big"].conflicts = {"s1", "s2"};
  s.pools["s1"].conflicts = {"big"};
  s.pools["s2"].conflicts = {"big"};
  use(s, "auto", kinds);
  SECTION("one job: the big pool, cold, is done first: sampled 20, video 25") {
    auto res = actors::planner::simulate(s, make_run(1), timing_of(kinds));
    REQUIRE(res.finished);
    CHECK(res.run.jobs[0].pool == "big");
    CHECK(makespan(res) == Approx(25));
  }
  SECTION("twenty jobs: the two small pools (2/15 a second beat 1/10)") {
    // s1, s2 take 10 jobs each: sampled at 30, 45, ..., 165. The last two latents arrive
    // together: handoff [165,166], decodes [166,170] and [170,174].
    auto res = actors::planner::simulate(s, make_run(20), timing_of(kinds));
    REQUIRE(res.finished);
    REQUIRE(res.violations.empty());
    for (auto& j : res.run.jobs)
      CHECK(j.pool != "big");
    CHECK(makespan(res) == Approx(174));
  }
}

namespace {

/// A run of `small` jobs of the fixtures' size (416 x 736 x 5), then `large` of 832 x 1472 x 5.
actors::coordinator::run shot_list(uint32_t small, uint32_t large) {
  auto r = make_run(small + large);
  for (uint32_t i = small; i < small + large; ++i) {
    r.jobs[i].spec.width = 832;
    r.jobs[i].spec.height = 1472;
  }
  return r;
}

/// The pools report in (idle, nothing loaded) at 0 and the run comes in.
void start(actors::coordinator::state& s, const actors::coordinator::run& r) {
  for (auto& [name, p] : s.pools)
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report(name, 1, 1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{r}, 0);
}

} // namespace

TEST_CASE("auto: a pool alone in holding a size keeps to it once helping with another size "
          "would end its own after the rest of the line") {
  // 10 s a job on either pool; a2 cannot hold the large size. a1 takes small job 0, a2
  // small job 1. At 10 a1 is free and asked for the next small job.
  std::map<std::string, kind_times> kinds{{"k", {10, 10}}};
  auto s = line_of({{"a1", "a", "k"}, {"a2", "a", "k"}});
  s.pools["a2"].max_load = 416 * 736 * 5;
  use(s, "auto", kinds);
  SECTION("2 small left, 2 large: helping would end the large at 40, the line is through at "
          "30: a1 takes a large job (it does not idle)") {
    start(s, shot_list(4, 2));
    REQUIRE(s.find_job("r1", 0)->pool == "a1");
    REQUIRE(s.find_job("r1", 1)->pool == "a2");
    actors::coordinator::step(s, actors::coordinator::ev_sample_result{sched_fixtures::sample_ok(*s.find_job("r1", 0))}, 10);
    CHECK(s.find_job("r1", 4)->pool == "a1");
    CHECK(s.find_job("r1", 2)->state == actors::coordinator::job_state::queued);
  }
  SECTION("8 small left, 2 large: the large still end by 40 of 60: a1 helps with the small") {
    start(s, shot_list(10, 2));
    REQUIRE(s.find_job("r1", 0)->pool == "a1");
    REQUIRE(s.find_job("r1", 1)->pool == "a2");
    actors::coordinator::step(s, actors::coordinator::ev_sample_result{sched_fixtures::sample_ok(*s.find_job("r1", 0))}, 10);
    CHECK(s.find_job("r1", 2)->pool == "a1");
    CHECK(s.find_job("r1", 10)->state == actors::coordinator::job_state::queued);
  }
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("auto, several sizes queued: a pool busy with a job of the run is free when its own "
          "job is sampled, not the asked size's") {
  // x: 10 s a small job, 100 s a large one; t: 30 s a small job, and it cannot hold a large.
  // x takes the large job 0 at 0, t is asked for the small job 1: x is busy until 100, so t
  // takes it (done at 30). Were x free at 10 (the small size's time), it could do job 1 by
  // 20, and t would idle.
  struct large_tenfold : fixed_estimates {
    using fixed_estimates::fixed_estimates;
    std::optional<double> sampling(const std::string& kind, const msg::job_spec& j,
                                   bool cold) const override {
      auto t = fixed_estimates::sampling(kind, j, cold);
      return j.width > 416 ? *t * 10 : *t;
    }
  };
  std::map<std::string, kind_times> kinds{{"x", {10, 10}}, {"t", {30, 30}}};
  auto s = line_of({{"X", "a", "x"}, {"T", "a", "t"}});
  s.pools["T"].max_load = 416 * 736 * 5;
  s.mode_policy["m"] = std::make_shared<actors::coordinator::auto_policy>(std::make_shared<large_tenfold>(kinds));
  auto r = make_run(2);
  r.jobs[0].spec.width = 832;  // job 0 large, job 1 small
  r.jobs[0].spec.height = 1472;
  start(s, r);
  CHECK(s.find_job("r1", 0)->pool == "X");
  CHECK(s.find_job("r1", 1)->pool == "T");
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a pool's max_load keeps jobs it cannot hold away, none able: refused at once") {
  std::map<std::string, kind_times> kinds{{"fast", {15, 10}}, {"slow", {35, 30}}};
  auto s = line_of({{"a1", "a", "fast"}, {"a2", "a", "slow"}});
  SECTION("the small pool is skipped, no out-of-memory attempt is made") {
    s.pools["a1"].max_load = 416 * 736 * 5 - 1;
    auto res = actors::planner::simulate(s, make_run(3), timing_of(kinds));
    REQUIRE(res.finished);
    for (auto& j : res.run.jobs) {
      CHECK(j.pool == "a2");
      CHECK(j.sample_attempts == 1);
    }
  }
  SECTION("no pool of the mode holds it: the job fails on submission") {
    s.pools["a1"].max_load = 1000;
    s.pools["a2"].max_load = 1000;
    auto res = actors::planner::simulate(s, make_run(2), timing_of(kinds));
    REQUIRE(res.finished);
    for (auto& j : res.run.jobs) {
      CHECK(j.state == actors::coordinator::job_state::failed);
      CHECK(j.sample_attempts == 0);
      CHECK(j.error.find("no pool of mode m can hold") != std::string::npos);
    }
  }
}

TEST_CASE("in_turn: a job whose home pool's host went down goes to a free pool") {
  std::map<std::string, kind_times> kinds{{"k", {10, 10}}};
  auto s = line_of({{"a1", "a", "k"}, {"c1", "c", "k"}});
  auto report = [](const std::string& pool, const std::string& host) {
    msg::pool_status st;
    st.pool = pool;
    st.host = host;
    st.epoch = 1;
    st.seq = 1;
    return st;
  };
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("a1", "a")}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("c1", "c")}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{make_run(2)}, 0);
  auto* j0 = s.find_job("r1", 0);
  auto* j1 = s.find_job("r1", 1);
  REQUIRE(j0->pool == "a1");
  REQUIRE(j1->pool == "c1");
  actors::coordinator::step(s, actors::coordinator::ev_peer{"c", false}, 1);
  // Its home is gone, but c1 holds a lease on it: the job stays until it ends.
  CHECK(j1->state == actors::coordinator::job_state::sampling);
  CHECK(j1->pool == "c1");
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, s.p.lease_s + 0.5);
  CHECK(j1->state == actors::coordinator::job_state::queued);  // the lease ended, a1 is busy: it waits
  msg::sample_result ok;
  ok.pool = "a1";
  ok.host = "a";
  ok.attempt = j0->attempt;
  ok.run_id = "r1";
  ok.index = 0;
  ok.outcome = msg::outcome::ok;
  ok.latent_sha256 = std::string(64, 'a');
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{ok}, 10);
  CHECK(j1->state == actors::coordinator::job_state::sampling);
  CHECK(j1->pool == "a1");
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("the scheduler's index matches a rebuilt one after every step, under faults") {
  std::map<std::string, kind_times> kinds{{"fast", {15, 10}}, {"slow", {35, 30}}};
  for (const char* policy : {"in_turn", "first_free", "auto"}) {
    for (int seed = 1; seed <= 40; ++seed) {
      actors::planner::faults f;
      f.seed = static_cast<uint64_t>(seed);
      f.drop = 0.05;
      f.duplicate = 0.05;
      f.max_delay_s = 3;
      f.crash = 0.01;
      auto s = line_of({{"a1", "a", "fast"}, {"a2", "a", "slow"}, {"a3", "c", "fast"}});
      s.pools["a1"].conflicts = {"a2"};
      s.pools["a2"].conflicts = {"a1"};
      s.p.max_attempts = 50;
      use(s, policy, kinds);
      actors::planner::sim_options o;
      o.check_index = true;
      auto res = actors::planner::simulate(s, make_run(8), timing_of(kinds), f, 1e6, o);
      INFO("policy " << policy << " seed " << seed);
      REQUIRE(res.violations.empty());
      REQUIRE(res.finished);
    }
  }
}

TEST_CASE("a decoder on a pool's GPU: never both at once, auto uses it at the end (hand-computed)") {
  // A1, A2 (host a, 10 s a job), X (host b, 12 s); decoders dec (4 s) and sd (8.5 s) on one
  // of A2's GPUs; handoff 1 s. Three jobs, one per pool: latents at 10, 10 and 12.
  // Only dec: decodes [11,15], [15,19], [19,23]. With sd: one of the two 10 s latents on sd
  // [11,19.5], the other on dec [11,15], X's on dec [15,19]: 19.5. Latent by latent, dec is
  // the earlier finish for the second 10 s latent (19 < 19.5), but then X's ends at 21.5
  // (on sd) or 23: the batch decides.
  std::map<std::string, kind_times> kinds{{"a", {10, 10}}, {"x", {12, 12}}};
  auto s = line_of({{"A1", "a", "a"}, {"A2", "a", "a"}, {"X", "b", "x"}});
  actors::coordinator::decoder_view sd;
  sd.name = "sd";
  sd.host = "a";
  sd.kind = "sk";
  sd.shares_gpu_with = {"A2"};
  s.decoders["sd"] = sd;
  s.pools["A2"].decoders_sharing = {"sd"};
  s.mode_decoders["m"] = {"dec", "sd"};
  auto t = timing_of(kinds);
  t.decode = [](const std::string& kind, const msg::job_spec&) { return kind == "sk" ? 8.5 : 4.0; };
  struct estimates : fixed_estimates {
    using fixed_estimates::fixed_estimates;
    double decode(const actors::coordinator::decoder_view& d, const msg::job_spec&) const override {
      return d.kind == "sk" ? 8.5 : 4.0;
    }
  };
  s.mode_policy["m"] = std::make_shared<actors::coordinator::auto_policy>(std::make_shared<estimates>(kinds));

  SECTION("the scheduler keeps them apart") {
    actors::coordinator::state st = s;
    actors::coordinator::reindex(st);
    for (auto& [name, p] : st.pools) {
      p.alive = true;
      p.epoch = 1;
    }
    st.decoders["sd"].alive = true;
    CHECK(st.pool_free("A2"));
    CHECK_FALSE(actors::coordinator::decoder_blocked(st, st.decoders.at("sd")));
    st.decoders["sd"].sent[7] = 0;  // a latent on its way to sd
    CHECK_FALSE(st.pool_free("A2"));
    CHECK(st.pool_free("A1"));
    st.decoders["sd"].sent.clear();
    st.pools["A2"].assigned = std::make_pair(std::string("r1"), 0u);  // A2 samples
    CHECK(actors::coordinator::decoder_blocked(st, st.decoders.at("sd")));
    CHECK_FALSE(actors::coordinator::decoder_blocked(st, st.decoders.at("dec")));
  }
  SECTION("auto decodes one latent on sd: 19.5 s") {
    auto res = actors::planner::simulate(s, make_run(3), t, {}, 1e9, {true});
    REQUIRE(res.finished);
    REQUIRE(res.violations.empty());
    CHECK(makespan(res) == Approx(19.5));
    int on_sd = 0;
    for (auto& j : res.run.jobs) {
      on_sd += j.decoder == "sd";
      if (j.pool == "X")
        CHECK(j.decoder == "dec");
    }
    CHECK(on_sd == 1);
  }
  SECTION("without sd: 23 s") {
    s.decoders.erase("sd");
    s.pools["A2"].decoders_sharing.clear();
    s.mode_decoders["m"] = {"dec"};
    auto res = actors::planner::simulate(s, make_run(3), t);
    REQUIRE(res.finished);
    CHECK(makespan(res) == Approx(23));
  }
}
