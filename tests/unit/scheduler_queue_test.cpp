// The queue: runs side by side share the line by priority then submission
// order; in_turn's rotation is over the queue; cancel stops queued and in-flight work;
// jobs added to an open run; all of it journaled (records) and rebuilt after a restart.
#include <catch2/catch.hpp>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/pool/pool_machine.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;
using sched_fixtures::run_of;

namespace {

/// Pool `pool` reports (epoch 7).
msg::pool_status report(const std::string& pool, uint64_t seq, uint64_t busy = 0) {
  return sched_fixtures::pool_report(pool, 7, seq, busy);
}

/// The sample orders among effects: (pool, run, index).
std::vector<std::tuple<std::string, std::string, uint32_t>> orders(
  const std::vector<actors::coordinator::effect>& fx) {
  std::vector<std::tuple<std::string, std::string, uint32_t>> out;
  for (auto& e : fx)
    if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
      out.emplace_back(o->order.pool, o->order.job.run_id, o->order.job.index);
  return out;
}

/// Every pool reports idle (seq given), and the effects of all those steps.
std::vector<actors::coordinator::effect> all_idle(actors::coordinator::state& s, uint64_t seq, double now) {
  std::vector<actors::coordinator::effect> fx;
  for (auto& [name, p] : std::map<std::string, actors::coordinator::pool_view>(s.pools)) {
    auto f = actors::coordinator::step(s, actors::coordinator::ev_pool_status{report(name, seq)}, now);
    fx.insert(fx.end(), f.begin(), f.end());
  }
  return fx;
}

} // namespace

TEST_CASE("in_turn's rotation is over the queue: 1-job runs go to every pool, not the first") {
  auto s = line_of(3);
  // The runs come in before any pool reports (as on a coordinator that starts with a queue).
  for (int k = 0; k < 3; ++k)
    actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r" + std::to_string(k), 1)}, 0);
  auto fx = all_idle(s, 1, 0);
  auto o = orders(fx);
  REQUIRE(o.size() == 3);
  std::map<std::string, std::string> pool_of;
  for (auto& [pool, run, index] : o)
    pool_of[run] = pool;
  // Per run the rotation would have given all three p0 (and two would wait for it).
  CHECK(pool_of["r0"] == "p0");
  CHECK(pool_of["r1"] == "p1");
  CHECK(pool_of["r2"] == "p2");
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a free pool takes the job of the highest-priority run, then the oldest") {
  auto s = line_of(1);
  all_idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("busy", 1)}, 0);  // takes p0
  REQUIRE(orders(fx).size() == 1);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("old", 2)}, 1);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("urgent", 2, 5)}, 2);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("new", 1)}, 3);
  // p0 finishes: which run's job does it get next, each time?
  std::vector<std::string> served;
  uint64_t seq = 2;
  for (int round = 0; round < 6; ++round) {
    auto* p = &s.pools.at("p0");
    REQUIRE(p->assigned);
    auto [run_id, index] = *p->assigned;
    auto* j = s.find_job(run_id, index);
    msg::sample_result r;
    r.pool = "p0";
    r.host = "a";
    r.attempt = j->attempt;
    r.run_id = run_id;
    r.index = index;
    r.outcome = msg::outcome::ok;
    r.latent_sha256 = std::string(64, 'a' + static_cast<char>(round));
    auto st = report("p0", seq++);
    st.unacked.push_back(r);
    auto f = actors::coordinator::step(s, actors::coordinator::ev_pool_status{st}, 10.0 * (round + 1));
    auto o = orders(f);
    if (round < 5) {
      REQUIRE(o.size() == 1);
      served.push_back(std::get<1>(o[0]));
    } else {
      CHECK(o.empty());
    }
  }
  CHECK(served == std::vector<std::string>{"urgent", "urgent", "old", "old", "new"});
}

TEST_CASE("cancel: queued jobs at once, an in-flight one ended on its pool, the pool freed") {
  auto s = line_of(2);
  all_idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 5)}, 0);
  REQUIRE(orders(fx).size() == 2);  // jobs 0 and 1 on p0 and p1
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("next", 1)}, 1);
  auto* j0 = s.find_job("r", 0);
  const uint64_t a0 = j0->attempt;
  // p0 shows it running.
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("p0", 2, a0)}, 1);

  fx = actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", std::nullopt}, 2);
  auto* r = s.find_run("r");
  REQUIRE(r != nullptr);
  CHECK(r->cancelled);
  CHECK(r->done);
  for (auto& j : r->jobs)
    CHECK(j.state == actors::coordinator::job_state::cancelled);
  // The pools running its jobs are told at once: ended and cancelled (they stop the call).
  std::set<std::string> told;
  for (auto& e : fx)
    if (auto* g = std::get_if<actors::coordinator::fx_grant>(&e)) {
      CHECK(g->grant.ended == g->grant.cancelled);
      REQUIRE(g->grant.cancelled.size() == 1);
      told.insert(g->target);
    }
  CHECK(told == std::set<std::string>{"pool:p0", "pool:p1"});
  // Journaled: every job and the run.
  std::size_t persisted = 0;
  bool run_persisted = false;
  for (auto& e : fx) {
    persisted += std::holds_alternative<actors::coordinator::fx_persist_job>(e) ? 1 : 0;
    run_persisted = run_persisted || std::holds_alternative<actors::coordinator::fx_persist_run>(e);
  }
  CHECK(persisted == 5);
  CHECK(run_persisted);
  // Nothing goes to p0 while it still shows the cancelled attempt; its report is answered
  // "ended, cancelled" again (a lost grant costs one status interval).
  CHECK(orders(fx).empty());
  fx = actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("p0", 3, a0)}, 3);
  CHECK(orders(fx).empty());
  bool regranted = false;
  for (auto& e : fx)
    if (auto* g = std::get_if<actors::coordinator::fx_grant>(&e))
      regranted = g->grant.cancelled == std::vector<uint64_t>{a0};
  CHECK(regranted);
  // The pool stopped: its result ("cancelled") is acked, not retried; the pool is free
  // and the next run's job goes there.
  msg::sample_result res;
  res.pool = "p0";
  res.host = "a";
  res.attempt = a0;
  res.run_id = "r";
  res.index = 0;
  res.outcome = msg::outcome::transient;
  res.error = "cancelled";
  auto st = report("p0", 4);
  st.unacked.push_back(res);
  fx = actors::coordinator::step(s, actors::coordinator::ev_pool_status{st}, 4);
  bool acked = false;
  for (auto& e : fx)
    if (auto* a = std::get_if<actors::coordinator::fx_ack>(&e))
      acked = acked || a->attempt == a0;
  CHECK(acked);
  CHECK(s.find_job("r", 0)->state == actors::coordinator::job_state::cancelled);
  CHECK(s.pool_free("p0"));
  // "next"'s job has turn 5 (after r's five jobs): its home is p1, free once p1 reports
  // idle too.
  CHECK(orders(fx).empty());
  fx = actors::coordinator::step(s, actors::coordinator::ev_pool_status{report("p1", 2)}, 5);
  auto o = orders(fx);
  REQUIRE(o.size() == 1);
  CHECK(o[0] == std::make_tuple(std::string("p1"), std::string("next"), 0u));
  CHECK(actors::coordinator::check_index(s).empty());
  CHECK(actors::coordinator::summarize(*s.find_run("r")).cancelled == 5);
  CHECK(actors::coordinator::run_state(*s.find_run("r")) == "cancelled");
}

TEST_CASE("cancel one job: the others go on, a late latent of it is not adopted") {
  auto s = line_of(1);
  all_idle(s, 1, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 3)}, 0);
  const uint64_t a0 = s.find_job("r", 0)->attempt;
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", 2u}, 1);  // queued
  CHECK(s.find_job("r", 2)->state == actors::coordinator::job_state::cancelled);
  CHECK(s.find_job("r", 0)->state == actors::coordinator::job_state::sampling);
  CHECK_FALSE(s.find_run("r")->cancelled);
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", 0u}, 2);  // in flight
  CHECK(s.find_job("r", 0)->state == actors::coordinator::job_state::cancelled);
  // The sampler ran to its end anyway (a backend that ignored the cancel): its latent is
  // not the job's; the pool is free again and job 1 goes there.
  msg::sample_result res;
  res.pool = "p0";
  res.host = "a";
  res.attempt = a0;
  res.run_id = "r";
  res.index = 0;
  res.outcome = msg::outcome::ok;
  res.latent_sha256 = std::string(64, 'c');
  auto st = report("p0", 2);
  st.unacked.push_back(res);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_pool_status{st}, 3);
  CHECK(s.find_job("r", 0)->state == actors::coordinator::job_state::cancelled);
  CHECK(s.find_job("r", 0)->latent_sha256.empty());
  auto o = orders(fx);
  REQUIRE(o.size() == 1);
  CHECK(std::get<2>(o[0]) == 1u);
  // Its latent is released when the host reports it.
  msg::latent_holdings h;
  h.host = "a";
  h.latents.push_back({std::string(64, 'c'), 10, "r", 0});
  fx = actors::coordinator::step(s, actors::coordinator::ev_latent_holdings{h}, 4);
  bool released = false;
  for (auto& e : fx)
    if (auto* rl = std::get_if<actors::coordinator::fx_release>(&e))
      released = rl->sha256s == std::vector<std::string>{std::string(64, 'c')};
  CHECK(released);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a cancelled run survives the journal: records round trip, restart keeps it") {
  auto s = line_of(1);
  all_idle(s, 1, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 2, -3)}, 0);
  const uint64_t a0 = s.find_job("r", 0)->attempt;
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", std::nullopt}, 1);
  // What the journal writes, read back into a fresh coordinator's state.
  auto fresh = line_of(1);
  const auto* r = s.find_run("r");
  auto back = actors::coordinator::run_from_record(actors::coordinator::run_record(*r));
  for (auto& j : r->jobs)
    back.jobs.push_back(actors::coordinator::job_from_record(actors::coordinator::job_record(j)));
  CHECK(back.priority == -3);
  CHECK(back.cancelled);
  CHECK(back.done);
  fresh.runs.push_back(back);
  actors::coordinator::reindex(fresh);
  // The pool still runs the cancelled attempt after the restart: told to stop it.
  auto fx = actors::coordinator::step(fresh, actors::coordinator::ev_pool_status{report("p0", 1, a0)}, 2);
  CHECK(orders(fx).empty());
  bool cancelled = false;
  for (auto& e : fx)
    if (auto* g = std::get_if<actors::coordinator::fx_grant>(&e))
      cancelled = g->grant.cancelled == std::vector<uint64_t>{a0};
  CHECK(cancelled);
  for (auto& j : fresh.find_run("r")->jobs)
    CHECK(j.state == actors::coordinator::job_state::cancelled);
  // resume does not reopen a cancelled run.
  actors::coordinator::step(fresh, actors::coordinator::ev_resume{"r"}, 3);
  CHECK(fresh.find_run("r")->done);
}

TEST_CASE("jobs added to an open run queue behind its others, a closed run takes none") {
  auto s = line_of(1);
  all_idle(s, 1, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  actors::coordinator::ev_add_jobs add{"r", {}};
  for (uint32_t i = 0; i < 2; ++i) {
    actors::coordinator::job j;
    j.spec = msg::job_spec{"", 0, 500 + i, 416, 736, 5, "q", "sha-q", ""};
    add.jobs.push_back(j);
  }
  auto fx = actors::coordinator::step(s, add, 1);
  auto* r = s.find_run("r");
  REQUIRE(r->jobs.size() == 3);
  CHECK(r->jobs[1].spec.index == 1);
  CHECK(r->jobs[2].spec.index == 2);
  CHECK(r->jobs[2].spec.run_id == "r");
  CHECK(r->jobs[2].state == actors::coordinator::job_state::queued);
  std::size_t persisted = 0;
  for (auto& e : fx)
    persisted += std::holds_alternative<actors::coordinator::fx_persist_job>(e) ? 1 : 0;
  CHECK(persisted == 2);
  CHECK(actors::coordinator::check_index(s).empty());
  CHECK_FALSE(r->done);
  // A cancelled run takes no more.
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", std::nullopt}, 2);
  actors::coordinator::step(s, add, 3);
  CHECK(s.find_run("r")->jobs.size() == 3);
}

TEST_CASE("a pool told an attempt was cancelled stops its sampler, one only ended does not") {
  actors::pool::state p;
  p.pool = "p0";
  p.host = "a";
  p.epoch = 9;
  msg::sample_order o;
  o.pool = "p0";
  o.attempt = 41;
  o.job = msg::job_spec{"r", 0, 1, 416, 736, 5, "p", "sha-p", ""};
  actors::pool::step(p, actors::pool::ev_order{o}, 0);
  actors::pool::step(p, actors::pool::ev_conditioned{41, true, "c", 0, ""}, 1);
  REQUIRE(p.at == actors::pool::phase::sampling);
  msg::lease_grant g;
  g.target = "p0";
  g.epoch = 9;
  g.ended = {41};
  auto fx = actors::pool::step(p, actors::pool::ev_grant{g, 2}, 2);
  for (auto& e : fx)
    CHECK_FALSE(std::holds_alternative<actors::pool::fx_cancel_stage>(e));
  g.cancelled = {41};
  fx = actors::pool::step(p, actors::pool::ev_grant{g, 3}, 3);
  bool stop = false;
  for (auto& e : fx)
    if (auto* c = std::get_if<actors::pool::fx_cancel_stage>(&e))
      stop = c->attempt == 41;
  CHECK(stop);
  // The call returns "cancelled": the pool is idle, the result reported.
  actors::pool::ev_sampled done;
  done.attempt = 41;
  done.outcome = msg::outcome::transient;
  done.error = "cancelled";
  actors::pool::step(p, done, 4);
  CHECK(p.at == actors::pool::phase::idle);
  CHECK(p.status().busy_attempt == 0);
}

TEST_CASE("a pool told an attempt was cancelled while conditioning drops it at once") {
  actors::pool::state p;
  p.pool = "p0";
  p.host = "a";
  p.epoch = 9;
  msg::sample_order o;
  o.pool = "p0";
  o.attempt = 42;
  o.job = msg::job_spec{"r", 0, 1, 416, 736, 5, "p", "sha-p", ""};
  actors::pool::step(p, actors::pool::ev_order{o}, 0);
  REQUIRE(p.at == actors::pool::phase::conditioning);
  msg::lease_grant g;
  g.target = "p0";
  g.epoch = 9;
  g.ended = {42};
  g.cancelled = {42};
  actors::pool::step(p, actors::pool::ev_grant{g, 1}, 1);
  CHECK(p.at == actors::pool::phase::idle);
  CHECK(p.status().busy_attempt == 0);
  // The encoder's late answer changes nothing; a new order is taken.
  actors::pool::step(p, actors::pool::ev_conditioned{42, true, "c", 0, ""}, 2);
  CHECK(p.at == actors::pool::phase::idle);
  o.attempt = 43;
  actors::pool::step(p, actors::pool::ev_order{o}, 3);
  CHECK(p.at == actors::pool::phase::conditioning);
}

TEST_CASE("submits and adds are idempotent by request id, in the machine") {
  auto s = sched_fixtures::line_of(1);
  auto r = sched_fixtures::run_of("r", 2);
  r.request_id = "req-1";
  auto accepted = [](const std::vector<actors::coordinator::effect>& fx) {
    for (auto& e : fx)
      if (auto* a = std::get_if<actors::coordinator::fx_accepted>(&e))
        return std::optional<actors::coordinator::fx_accepted>(*a);
    return std::optional<actors::coordinator::fx_accepted>();
  };
  auto a = accepted(actors::coordinator::step(s, actors::coordinator::ev_submit{r}, 0));
  REQUIRE(a);
  CHECK(a->run_id == "r");
  CHECK_FALSE(a->duplicate);
  // The same request retried under a new run id: nothing new, the first run answers.
  auto again = sched_fixtures::run_of("r2", 2);
  again.request_id = "req-1";
  a = accepted(actors::coordinator::step(s, actors::coordinator::ev_submit{again}, 1));
  REQUIRE(a);
  CHECK(a->run_id == "r");
  CHECK(a->duplicate);
  CHECK(s.runs.size() == 1);
  CHECK(actors::coordinator::run_of_request(s, "req-1")->id == "r");
  CHECK(actors::coordinator::run_of_request(s, "other") == nullptr);

  actors::coordinator::ev_add_jobs add;
  add.run_id = "r";
  add.request_id = "add-1";
  add.jobs.resize(3);
  for (auto& j : add.jobs)
    j.spec = s.runs[0].jobs[0].spec;
  a = accepted(actors::coordinator::step(s, add, 2));
  REQUIRE(a);
  CHECK(a->first_index == 2);
  CHECK(a->count == 3);
  CHECK_FALSE(a->duplicate);
  CHECK(s.find_run("r")->jobs.size() == 5);
  a = accepted(actors::coordinator::step(s, add, 3));  // retried
  REQUIRE(a);
  CHECK(a->duplicate);
  CHECK(a->first_index == 2);
  CHECK(s.find_run("r")->jobs.size() == 5);
  CHECK(actors::coordinator::check_index(s).empty());
}
