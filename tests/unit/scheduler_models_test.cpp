// Models and placement: a pool holds one model at a time, a job of another model is a cold
// stage (a switch) in the planner's line as in the sim backend, and the scheduler keeps a
// pool to the model it holds while jobs of it are queued, without starving another model.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>

#include "actors/coordinator/policy.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/planner/line_sim.hpp"
#include "config/profile/profile.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;

namespace {

/// Every pool: 25 s cold (its model loaded first), 10 s warm; handoff 1 s, decode 4 s.
actors::planner::timing switch_timing() {
  actors::planner::timing t;
  t.sample = [](const std::string&, const msg::job_spec&, bool cold) {
    return actors::planner::sample_time{cold ? 25.0 : 10.0, false};
  };
  t.conditioning = [](const std::string&) { return 0.0; };
  t.handoff = [](const std::string&, uint64_t) { return 1.0; };
  t.decode = [](const std::string&, const msg::job_spec&) { return 4.0; };
  t.latent_bytes = [](const msg::job_spec&) { return uint64_t{13000000}; };
  return t;
}

class switch_estimates : public actors::coordinator::stage_estimates {
public:
  std::optional<double> sampling(const std::string&, const msg::job_spec&,
                                 bool cold) const override {
    return cold ? 25.0 : 10.0;
  }
  double conditioning(const std::string&) const override { return 0; }
  double handoff(const std::string&, const actors::coordinator::decoder_view&,
                 const msg::job_spec&) const override {
    return 1;
  }
  double decode(const actors::coordinator::decoder_view&, const msg::job_spec&) const override { return 4; }
};

/// A run whose job i needs model models[i % models.size()].
actors::coordinator::run run_of_models(uint32_t count, const std::vector<std::string>& models) {
  auto r = sched_fixtures::run_of("r1", count);
  for (uint32_t i = 0; i < count; ++i)
    r.jobs[i].spec.model = models[i % models.size()];
  return r;
}

std::size_t colds(const actors::planner::result& res) {
  std::size_t n = 0;
  for (auto& j : res.run.jobs)
    n += j.cold ? 1 : 0;
  return n;
}

double makespan(const actors::planner::result& r) { return actors::coordinator::summarize(r.run).makespan_s; }

/// The models each pool sampled, in the order it sampled them.
std::map<std::string, std::string> model_sequence(const actors::planner::result& res) {
  std::map<double, std::pair<std::string, std::string>> by_start;
  for (auto& j : res.run.jobs)
    by_start[j.sample_start + j.spec.index * 1e-6] = {j.pool, j.spec.model};
  std::map<std::string, std::string> out;
  for (auto& [t, pm] : by_start)
    out[pm.first] += pm.second;
  return out;
}

void use_policy(actors::coordinator::state& s, const std::string& name) {
  s.mode_policy["m"] = actors::coordinator::make_policy(name, std::make_shared<switch_estimates>());
  REQUIRE(s.mode_policy["m"] != nullptr);
}

/// first_free (the lowest job to the first free pool) expecting switch_estimates' times:
/// model affinity can weigh which pool gets through a job sooner.
class first_free_estimating : public actors::coordinator::first_free_policy {
public:
  std::optional<double> expected_sampling(const std::string& kind, const msg::job_spec& j,
                                          bool cold) const override {
    return switch_estimates{}.sampling(kind, j, cold);
  }
};

} // namespace

TEST_CASE("line_sim: a job of another model than the pool holds is a cold stage") {
  // One pool, jobs A B A in that order and nothing to choose: three loads, 25 s each.
  auto s = line_of(1);
  use_policy(s, "first_free");
  s.p.model_wait_s = 0;  // no job waits for the pool's model
  auto res = actors::planner::simulate(s, run_of_models(3, {"A", "B"}), switch_timing());
  REQUIRE(res.finished);
  REQUIRE(res.violations.empty());
  CHECK(colds(res) == 3);
  CHECK(res.run.jobs[2].sample_end == Approx(75));
  // Jobs of one model: only the first loads it.
  auto same = actors::planner::simulate(s, run_of_models(3, {"A"}), switch_timing());
  CHECK(colds(same) == 1);
  CHECK(same.run.jobs[2].sample_end == Approx(45));
}

TEST_CASE("model affinity: a pool keeps to its model while jobs of it are queued") {
  // Two pools, 16 jobs in pairs A A B B A A B B ... Placed blind (no job waits), every
  // pair loads the other model: 16 cold stages. Kept to their models, the pools load A at
  // the start and B once each when the As are done: 4.
  for (const char* policy : {"first_free", "in_turn", "auto"}) {
    DYNAMIC_SECTION(policy) {
      auto s = line_of(2);
      use_policy(s, policy);
      auto list = run_of_models(16, {"A", "A", "B", "B"});
      s.p.model_wait_s = 0;
      auto blind = actors::planner::simulate(s, list, switch_timing());
      s.p.model_wait_s = -1;  // the default
      auto kept = actors::planner::simulate(s, list, switch_timing());
      REQUIRE(blind.finished);
      REQUIRE(kept.finished);
      REQUIRE(kept.violations.empty());
      CHECK(colds(blind) == 16);
      CHECK(colds(kept) == 4);
      // 8 jobs a pool: blind 8 x 25 = 200 s of sampling, kept 2 x 25 + 6 x 10 = 110 s.
      CHECK(makespan(kept) < makespan(blind) * 0.6);
      for (auto& [pool, seq] : model_sequence(kept))
        CHECK(seq == "AAAABBBB");
    }
  }
}

TEST_CASE("model affinity never starves a model: a passed-over job goes after model_wait_s") {
  // One pool, 1 B job among 12 As. With model_wait_s 40 the B (job 1) is passed over from
  // 25 s, while the pool holds A, until it has been for 40 s; then the pool switches to it.
  auto s = line_of(1);
  use_policy(s, "first_free");
  s.p.model_wait_s = 40;
  auto list = run_of_models(12, {"A"});
  list.jobs[1].spec.model = "B";
  auto res = actors::planner::simulate(s, list, switch_timing());
  REQUIRE(res.finished);
  const auto& b = res.run.jobs[1];
  // A [0,25], then As of 10 s from 25: at 65 the B has been passed over for 40 s.
  CHECK(b.sample_start == Approx(65));
  CHECK(b.cold);
  // The As after it load A again once: 1 (A) + 1 (B) + 1 (A again) cold stages.
  CHECK(colds(res) == 3);
  // The default wait: one cold stage of the job as the policy estimates it (auto: 25 s),
  // so the B goes at the first decision 25 s after it was first passed over.
  use_policy(s, "auto");
  s.p.model_wait_s = -1;
  auto dflt = actors::planner::simulate(s, list, switch_timing());
  REQUIRE(dflt.finished);
  CHECK(dflt.run.jobs[1].sample_start == Approx(55));
}

TEST_CASE("model affinity: a pool takes a job of its own model of another size when a pool "
          "that will hold the job's model gets through it sooner") {
  // p0 holds A, p1 holds B; jobs B0, B1, and A2 of another size. B0 goes to p1 (it holds
  // B); first_free then sends B1 to p0. p0 would be through B1 and then A2 at 1 + 25 + 25 =
  // 51, p1 is through B0 and then B1 at 1 + 10 + 10 = 21: p0 takes A2, B1 waits for p1.
  auto s = line_of(2);
  s.mode_policy["m"] = std::make_shared<first_free_estimating>();
  s.p.model_wait_s = 40;
  for (auto& name : {"p0", "p1"})
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report(name, 7, 1)}, 0);
  s.pools["p0"].warm = s.pools["p1"].warm = true;
  s.pools["p0"].model = "A";
  s.pools["p1"].model = "B";
  auto list = run_of_models(3, {"B", "B", "A"});
  list.jobs[2].spec.width = 480;
  list.jobs[2].spec.height = 832;
  actors::coordinator::step(s, actors::coordinator::ev_submit{list}, 1);
  CHECK(s.find_job("r1", 0)->pool == "p1");
  CHECK(s.find_job("r1", 2)->pool == "p0");
  CHECK(s.find_job("r1", 1)->state == actors::coordinator::job_state::queued);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("model affinity: a job passed over for a pool that will hold its model goes after "
          "twice model_wait_s") {
  // p0 holds A, p1 holds B and runs B0 (it never reports back: it stays the sooner pool for
  // B1). model_wait_s 40: B1, passed over at 1, is still passed over at 50 (49 s: past
  // model_wait_s, and p1 still gets through it sooner) and goes to p0 at 85 (84 s >= 80).
  auto s = line_of(2);
  s.mode_policy["m"] = std::make_shared<first_free_estimating>();
  s.p.model_wait_s = 40;
  for (auto& name : {"p0", "p1"})
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report(name, 7, 1)}, 0);
  s.pools["p0"].warm = s.pools["p1"].warm = true;
  s.pools["p0"].model = "A";
  s.pools["p1"].model = "B";
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of_models(6, {"B", "B", "A", "A", "A", "A"})}, 1);
  REQUIRE(s.find_job("r1", 0)->pool == "p1");
  REQUIRE(s.find_job("r1", 2)->pool == "p0");
  const actors::coordinator::job& b1 = *s.find_job("r1", 1);
  auto p0_done = [&](uint32_t a_job, double now) {
    actors::coordinator::step(s, actors::coordinator::ev_sample_result{sched_fixtures::sample_ok(*s.find_job("r1", a_job))},
                now);
  };
  p0_done(2, 30);
  CHECK(s.find_job("r1", 3)->pool == "p0");
  CHECK(b1.state == actors::coordinator::job_state::queued);
  p0_done(3, 50);  // waited 49 s of 40
  CHECK(s.find_job("r1", 4)->pool == "p0");
  CHECK(b1.state == actors::coordinator::job_state::queued);
  p0_done(4, 85);  // waited 84 s: twice model_wait_s is past
  CHECK(b1.state == actors::coordinator::job_state::sampling);
  CHECK(b1.pool == "p0");
  CHECK(s.find_job("r1", 5)->state == actors::coordinator::job_state::queued);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("model affinity: a free pool holding the job's model takes it instead") {
  // p0 holds A, p1 holds B, both free; the policy (first_free) sends the B job to p0, first
  // in the mode: p1 takes it. With no job passed over (model_wait_s 0) this is the pool
  // choice alone.
  auto s = line_of(2);
  use_policy(s, "first_free");
  s.p.model_wait_s = 0;
  for (auto& name : {"p0", "p1"})
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report(name, 7, 1)}, 0);
  s.pools["p0"].warm = s.pools["p1"].warm = true;
  s.pools["p0"].model = "A";
  s.pools["p1"].model = "B";
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of_models(1, {"B"})}, 1);
  std::vector<std::string> to;
  for (auto& e : fx)
    if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
      to.push_back(o->order.pool);
  CHECK(to == std::vector<std::string>{"p1"});
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("profile: a model's own speed and load time on a pool kind") {
  auto text = std::string(config::profile::profile::reference_json());
  auto j = nlohmann::json::parse(text);
  auto& pool = j["pools"].begin().value();
  const std::string kind = j["pools"].begin().key();
  pool["models"] = {{"fast-int8", {{"warm_factor", 0.5}, {"source", "measured"}}},
                    {"big", {{"load", {{"s", 300}, {"source", "a 40 GB load"}}},
                             {"source", "measured"}}}};
  auto p = config::profile::profile::from_json(j);
  auto base = config::profile::profile::from_json(nlohmann::json::parse(text));
  auto size = p.pools().at(kind).sampling.front().size;
  using config::profile::model_state;
  double warm = base.sampling(kind, size, model_state::warm).s;
  double cold = base.sampling(kind, size, model_state::cold).s;
  CHECK(p.sampling(kind, size, model_state::warm).s == Approx(warm));
  CHECK(p.sampling(kind, size, model_state::warm, "other").s == Approx(warm));
  CHECK(p.sampling(kind, size, model_state::warm, "fast-int8").s == Approx(warm * 0.5));
  CHECK(p.sampling(kind, size, model_state::cold, "fast-int8").s
        == Approx(warm * 0.5 + cold - warm));
  CHECK(p.sampling(kind, size, model_state::warm, "big").s == Approx(warm));
  CHECK(p.sampling(kind, size, model_state::cold, "big").s == Approx(warm + 300));

  pool["models"]["fast-int8"]["warm_factor"] = 0;
  try {
    config::profile::profile::from_json(j);
    FAIL("a warm_factor of 0 was accepted");
  } catch (const config::profile::profile_error& e) {
    CHECK(e.path() == "/pools/" + kind + "/models/fast-int8/warm_factor");
  }
  pool["models"]["fast-int8"] = {{"warm_factor", 1}, {"source", "x"}, {"speed", 2}};
  CHECK_THROWS_AS(config::profile::profile::from_json(j), config::profile::profile_error);
}
