// Drains in the scheduler machine (actors/coordinator/drain.hpp): a drained pool or decoder
// gets no new order while the stage it runs finishes; by hand, by host, by a card's health
// (acting on changes only), undrain, and drains restored after a restart.
#include <catch2/catch.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;
using sched_fixtures::run_of;

using sched_fixtures::all_of;

namespace {

msg::pool_status report(const std::string& pool, uint64_t seq, uint64_t busy = 0) {
  return sched_fixtures::pool_report(pool, 7, seq, busy);
}

std::vector<std::string> pools_ordered(const std::vector<actors::coordinator::effect>& fx) {
  std::vector<std::string> out;
  for (auto& e : fx)
    if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
      out.push_back(o->order.pool);
  return out;
}

std::vector<actors::coordinator::effect> idle(actors::coordinator::state& s, uint64_t seq, double now) {
  std::vector<actors::coordinator::effect> fx;
  for (auto& [name, p] : std::map<std::string, actors::coordinator::pool_view>(s.pools)) {
    auto f = actors::coordinator::step(s, actors::coordinator::ev_pool_status{report(name, seq)}, now);
    fx.insert(fx.end(), f.begin(), f.end());
  }
  return fx;
}

msg::decoder_status decoder_report(uint64_t seq) {
  msg::decoder_status d;
  d.decoder = "dec";
  d.host = "b";
  d.epoch = 3;
  d.seq = seq;
  d.credits = 2;
  return d;
}

/// Pool `pool` finishes the job it runs, ok, in its report `seq` at `now`.
std::vector<actors::coordinator::effect> finish(actors::coordinator::state& s, const std::string& pool, uint64_t seq,
                                  double now) {
  auto& p = s.pools.at(pool);
  REQUIRE(p.assigned);
  auto [run_id, index] = *p.assigned;
  msg::sample_result r;
  r.pool = pool;
  r.host = "a";
  r.attempt = s.find_job(run_id, index)->attempt;
  r.run_id = run_id;
  r.index = index;
  r.outcome = msg::outcome::ok;
  r.latent_sha256 = std::string(64, 'c');
  auto st = report(pool, seq);
  st.unacked.push_back(r);
  return actors::coordinator::step(s, actors::coordinator::ev_pool_status{st}, now);
}

} // namespace

TEST_CASE("drain by hand: the pool gets no order, its jobs go to the others, undrain") {
  auto s = line_of(2);
  idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", true, "new fans"}, 0);
  auto changed = all_of<actors::coordinator::fx_drain_changed>(fx);
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].target == "pool:p0");
  CHECK(changed[0].drained);
  CHECK(changed[0].reason == "new fans");
  CHECK(all_of<actors::coordinator::fx_persist_drains>(fx).size() == 1);
  REQUIRE(all_of<actors::coordinator::fx_drain_answer>(fx).size() == 1);
  CHECK(all_of<actors::coordinator::fx_drain_answer>(fx)[0].targets == std::vector<std::string>{"pool:p0"});
  CHECK(s.pools.at("p0").drained);

  // in_turn homes job 0 on p0: with p0 drained it goes to p1, and nothing ever to p0.
  fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 3)}, 1);
  CHECK(pools_ordered(fx) == std::vector<std::string>{"p1"});
  for (uint64_t seq = 2; seq < 4; ++seq) {
    fx = finish(s, "p1", seq, 10.0 * seq);
    CHECK(pools_ordered(fx) == std::vector<std::string>{"p1"});
    auto more = actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("p0", seq)}, 10.0 * seq);
    CHECK(pools_ordered(more).empty());
  }
  CHECK(actors::coordinator::check_index(s).empty());

  // Drained again: nothing changes, nothing to write.
  fx = actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", true, "new fans"}, 40);
  CHECK(all_of<actors::coordinator::fx_drain_changed>(fx).empty());
  CHECK(all_of<actors::coordinator::fx_persist_drains>(fx).empty());

  fx = actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", false, ""}, 41);
  REQUIRE(all_of<actors::coordinator::fx_drain_changed>(fx).size() == 1);
  CHECK_FALSE(all_of<actors::coordinator::fx_drain_changed>(fx)[0].drained);
  CHECK(all_of<actors::coordinator::fx_persist_drains>(fx).size() == 1);
  CHECK_FALSE(s.pools.at("p0").drained);
  CHECK(s.drains.empty());
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("drain: the stage a pool runs finishes and counts, then it takes nothing more") {
  auto s = line_of(1);
  idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 2)}, 1);
  REQUIRE(pools_ordered(fx) == std::vector<std::string>{"p0"});
  actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", true, ""}, 2);
  CHECK(s.drains.at("pool:p0").reason == "drained by hand");
  fx = finish(s, "p0", 2, 5);
  CHECK(s.find_job("r", 0)->state != actors::coordinator::job_state::queued);
  CHECK(s.find_job("r", 0)->state != actors::coordinator::job_state::sampling);
  CHECK(pools_ordered(fx).empty());  // job 1 waits
  CHECK(s.find_job("r", 1)->state == actors::coordinator::job_state::queued);
  fx = actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", false, ""}, 6);
  CHECK(pools_ordered(fx) == std::vector<std::string>{"p0"});
}

TEST_CASE("drain a host: its pools and decoders, unknown names are refused, naming them") {
  auto s = line_of({{"a1", "a", "k"}, {"a2", "a", "k"}, {"b1", "b", "k"}});
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_drain{"host", "b", true, "maintenance"}, 0);
  auto answer = all_of<actors::coordinator::fx_drain_answer>(fx);
  REQUIRE(answer.size() == 1);
  CHECK(answer[0].targets == std::vector<std::string>{"pool:b1", "decoder:dec"});
  CHECK(s.pools.at("b1").drained);
  CHECK(s.decoders.at("dec").drained);
  CHECK_FALSE(s.pools.at("a1").drained);

  for (auto [kind, name, word] : {std::tuple<const char*, const char*, const char*>{
                                      "pool", "nope", "no pool named 'nope'"},
                                  {"decoder", "x", "no decoder named 'x'"},
                                  {"host", "zz", "host named 'zz'"},
                                  {"gpu", "a", "pool, decoder or host"}}) {
    fx = actors::coordinator::step(s, actors::coordinator::ev_drain{kind, name, true, ""}, 1);
    answer = all_of<actors::coordinator::fx_drain_answer>(fx);
    REQUIRE(answer.size() == 1);
    CHECK(answer[0].targets.empty());
    CHECK_THAT(answer[0].error, Catch::Contains(word));
    CHECK(all_of<actors::coordinator::fx_persist_drains>(fx).empty());
  }
}

TEST_CASE("a drained decoder takes no latent, sampled jobs wait for it, then go") {
  auto s = line_of(1);
  idle(s, 1, 0);
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_report(1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_drain{"decoder", "dec", true, ""}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 1);
  auto fx = finish(s, "p0", 2, 5);
  CHECK(all_of<actors::coordinator::fx_send_decode>(fx).empty());
  CHECK(s.find_job("r", 0)->state == actors::coordinator::job_state::sampled);
  fx = actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_report(2)}, 6);
  CHECK(all_of<actors::coordinator::fx_send_decode>(fx).empty());
  fx = actors::coordinator::step(s, actors::coordinator::ev_drain{"decoder", "dec", false, ""}, 7);
  CHECK(all_of<actors::coordinator::fx_send_decode>(fx).size() == 1);
}

TEST_CASE("a sick card drains its users on the change only, recovery or undrain ends it") {
  auto s = line_of(2);
  idle(s, 1, 0);
  actors::coordinator::ev_gpu_health sick{"a/g0", true, "2 uncorrectable ECC errors", {"pool:p0", "pool:gone"}};
  auto fx = actors::coordinator::step(s, sick, 0);
  auto changed = all_of<actors::coordinator::fx_drain_changed>(fx);
  REQUIRE(changed.size() == 1);  // a user the state does not know is skipped
  CHECK(changed[0].target == "pool:p0");
  CHECK_THAT(changed[0].reason, Catch::Contains("a/g0") && Catch::Contains("ECC"));
  CHECK(s.drains.at("pool:p0").sick_gpus == std::set<std::string>{"a/g0"});
  CHECK(all_of<actors::coordinator::fx_persist_drains>(fx).size() == 1);

  // The same verdict again (level-triggered reports): nothing.
  fx = actors::coordinator::step(s, sick, 1);
  CHECK(all_of<actors::coordinator::fx_drain_changed>(fx).empty());
  CHECK(all_of<actors::coordinator::fx_persist_drains>(fx).empty());

  // By hand too: the card's recovery leaves the hand drain in place.
  actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", true, "checking"}, 2);
  fx = actors::coordinator::step(s, actors::coordinator::ev_gpu_health{"a/g0", false, "", {"pool:p0"}}, 3);
  CHECK(all_of<actors::coordinator::fx_drain_changed>(fx).empty());
  CHECK(s.pools.at("p0").drained);
  CHECK(s.drains.at("pool:p0").sick_gpus.empty());
  actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", false, ""}, 4);
  CHECK_FALSE(s.pools.at("p0").drained);

  // Sick again, then undrained by hand: the card's next sick report (no change) holds off.
  actors::coordinator::step(s, sick, 5);
  CHECK(s.pools.at("p0").drained);
  actors::coordinator::step(s, actors::coordinator::ev_drain{"pool", "p0", false, ""}, 6);
  CHECK_FALSE(s.pools.at("p0").drained);
  fx = actors::coordinator::step(s, sick, 7);
  CHECK_FALSE(s.pools.at("p0").drained);
  // Well, then sick once more: a change, it drains again.
  fx = actors::coordinator::step(s, actors::coordinator::ev_gpu_health{"a/g0", false, "", {"pool:p0"}}, 8);
  CHECK(all_of<actors::coordinator::fx_drain_changed>(fx).empty());
  fx = actors::coordinator::step(s, sick, 9);
  CHECK(s.pools.at("p0").drained);
  // Recovered: back in service.
  fx = actors::coordinator::step(s, actors::coordinator::ev_gpu_health{"a/g0", false, "", {"pool:p0"}}, 10);
  REQUIRE(all_of<actors::coordinator::fx_drain_changed>(fx).size() == 1);
  CHECK_FALSE(all_of<actors::coordinator::fx_drain_changed>(fx)[0].drained);
  CHECK(s.drains.empty());
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("drains restored after a restart: the views marked, dispatch avoids them") {
  auto s = line_of(2);
  actors::coordinator::drain d;
  d.by_hand = true;
  d.reason = "maintenance";
  actors::coordinator::drain stale;  // neither by hand nor sick: not a drain
  std::map<std::string, actors::coordinator::drain> saved{
      {"pool:p0", d}, {"pool:vanished", d}, {"pool:p1", stale}};
  actors::coordinator::restore_drains(s, saved);
  CHECK(s.pools.at("p0").drained);
  CHECK_FALSE(s.pools.at("p1").drained);
  CHECK(s.drains.size() == 1);
  idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 2)}, 1);
  CHECK(pools_ordered(fx) == std::vector<std::string>{"p1"});
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a sick card with two users drains both, and its recovery releases both") {
  auto s = line_of(2);
  idle(s, 1, 0);
  actors::coordinator::ev_gpu_health sick{"a/g0", true, "lost", {"pool:p0", "pool:p1"}};
  auto fx = actors::coordinator::step(s, sick, 0);
  CHECK(all_of<actors::coordinator::fx_drain_changed>(fx).size() == 2);
  for (auto* t : {"pool:p0", "pool:p1"}) {
    INFO(t);
    REQUIRE(s.drains.count(t) == 1);
    CHECK(s.drains.at(t).sick_gpus == std::set<std::string>{"a/g0"});
  }
  fx = actors::coordinator::step(s, actors::coordinator::ev_gpu_health{"a/g0", false, "", {"pool:p0", "pool:p1"}}, 1);
  CHECK(all_of<actors::coordinator::fx_drain_changed>(fx).size() == 2);
  CHECK(s.drains.empty());
  CHECK_FALSE(s.pools.at("p0").drained);
  CHECK_FALSE(s.pools.at("p1").drained);
}
