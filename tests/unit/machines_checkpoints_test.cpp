// Sampling checkpoints in the pure machines: the scheduler journals the newest ones a pool
// reports, resumes a lost attempt from them (on the same pool or another of the same kind,
// waiting a while for a host that is down), drops one that did not verify, starts a bigger
// kind from step 0, releases them once the latent is made, counts only the work since the
// newest one as paid twice; preemption; the pool machine's side; the latent store's.

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/latents/store_machine.hpp"
#include "actors/pool/pool_machine.hpp"

using namespace vidline;

namespace {

std::string sha_of(char c) { return std::string(64, c); }

msg::checkpoint_ref ckpt(uint32_t step, char sha, const std::string& host, double made,
                         uint64_t attempt) {
  msg::checkpoint_ref c;
  c.step = step;
  c.steps = 30;
  c.sha256 = sha_of(sha);
  c.bytes = 1000;
  c.host = host;
  c.made_unix_s = made;  // time_scale 1: unix seconds are run-clock seconds here
  c.attempt = attempt;
  return c;
}

/// A line of pools (name, host, kind) in mode "m" under first_free, no retry backoff.
struct line {
  actors::coordinator::state s;
  std::map<std::string, uint64_t> seq;
  std::vector<actors::coordinator::effect> fx;

  explicit line(const std::vector<std::tuple<std::string, std::string, std::string>>& pools) {
    for (auto& [name, host, kind] : pools) {
      actors::coordinator::pool_view v;
      v.name = name;
      v.host = host;
      v.kind = kind;
      v.gpus = 8;
      s.pools[name] = v;
      s.modes["m"].push_back(name);
    }
    s.mode_policy["m"] = std::make_shared<actors::coordinator::first_free_policy>();
    s.p.retry_backoff_s = 0;
  }

  const std::vector<actors::coordinator::effect>& step(const actors::coordinator::event& e, double t) {
    fx = actors::coordinator::step(s, e, t, t);
    return fx;
  }

  const std::vector<actors::coordinator::effect>& report(const std::string& pool, double t, uint64_t busy = 0,
                                           std::vector<msg::checkpoint_ref> cs = {}) {
    msg::pool_status st;
    st.pool = pool;
    st.host = s.pools.at(pool).host;
    st.epoch = 1;
    st.seq = ++seq[pool];
    st.busy_attempt = busy;
    st.checkpoints = std::move(cs);
    return step(actors::coordinator::ev_pool_status{st}, t);
  }

  const std::vector<actors::coordinator::effect>& result(const std::string& pool, const actors::coordinator::job& j,
                                           const char* outcome, double start, double end,
                                           std::vector<msg::checkpoint_ref> cs = {},
                                           std::string bad = "") {
    msg::sample_result r;
    r.pool = pool;
    r.host = s.pools.at(pool).host;
    r.attempt = j.attempt;
    r.run_id = j.spec.run_id;
    r.index = j.spec.index;
    r.outcome = outcome;
    r.error = outcome == std::string(msg::outcome::ok) ? "" : "worker crashed";
    if (r.outcome == msg::outcome::ok) {
      r.latent_sha256 = sha_of('f');
      r.latent_bytes = 13;
    }
    r.start_unix_s = start;
    r.sampling_start_unix_s = start;
    r.end_unix_s = end;
    r.checkpoints = std::move(cs);
    r.bad_checkpoint = std::move(bad);
    // As a pool sends it: in its next report, idle again.
    msg::pool_status st;
    st.pool = pool;
    st.host = r.host;
    st.epoch = 1;
    st.seq = ++seq[pool];
    st.unacked.push_back(r);
    return step(actors::coordinator::ev_pool_status{st}, end);
  }

  void submit(const std::string& id, uint32_t jobs, double t, int32_t priority = 0) {
    actors::coordinator::run r;
    r.id = id;
    r.mode = "m";
    r.priority = priority;
    r.rerender = true;
    for (uint32_t i = 0; i < jobs; ++i) {
      actors::coordinator::job j;
      j.spec = msg::job_spec{id, i, 100 + i, 416, 736, 5, "p", "sha-p", ""};
      r.jobs.push_back(j);
    }
    step(actors::coordinator::ev_submit{r}, t);
  }

  actors::coordinator::job& job(const std::string& run, uint32_t i = 0) { return *s.find_job(run, i); }

  std::vector<msg::sample_order> orders() const {
    std::vector<msg::sample_order> out;
    for (auto& e : fx)
      if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
        out.push_back(o->order);
    return out;
  }

  std::vector<std::string> released() const {
    std::vector<std::string> out;
    for (auto& e : fx)
      if (auto* r = std::get_if<actors::coordinator::fx_release>(&e))
        out.insert(out.end(), r->sha256s.begin(), r->sha256s.end());
    return out;
  }

  bool persisted(const std::string& run, uint32_t i = 0) const {
    for (auto& e : fx)
      if (auto* p = std::get_if<actors::coordinator::fx_persist_job>(&e); p && p->run_id == run && p->index == i)
        return true;
    return false;
  }

  std::vector<uint64_t> preempts() const {
    std::vector<uint64_t> out;
    for (auto& e : fx)
      if (auto* g = std::get_if<actors::coordinator::fx_grant>(&e))
        out.insert(out.end(), g->grant.preempt.begin(), g->grant.preempt.end());
    return out;
  }
};

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

} // namespace

TEST_CASE("checkpoints: journaled as reported, a lost attempt resumes from the newest, "
          "paying twice only the work since it") {
  line l({{"p0", "a", "k"}, {"p1", "c", "k"}});
  l.report("p0", 0);
  l.report("p1", 0);
  l.submit("r1", 1, 0);
  auto& j = l.job("r1");
  REQUIRE(j.state == actors::coordinator::job_state::sampling);
  REQUIRE(l.orders().size() == 1);
  CHECK(l.orders()[0].resume.step == 0);  // the first attempt starts from step 0
  const uint64_t a = j.attempt;

  l.report(j.pool, 10, a, {ckpt(10, '1', "a", 9, a)});
  CHECK(l.persisted("r1"));
  REQUIRE(j.checkpoints.size() == 1);
  l.report(j.pool, 11, a, {ckpt(10, '1', "a", 9, a)});
  CHECK_FALSE(l.persisted("r1"));  // the same again: nothing new to journal
  l.report(j.pool, 20, a, {ckpt(10, '1', "a", 9, a), ckpt(20, '2', "a", 19, a)});
  REQUIRE(j.checkpoints.size() == 2);
  l.report(j.pool, 24, a, {ckpt(20, '2', "a", 19, a), ckpt(25, '3', "a", 23, a)});
  // Two kept: the oldest released on its host.
  REQUIRE(j.checkpoints.size() == 2);
  CHECK(j.checkpoints.front().ref.step == 20);
  CHECK(has(l.released(), sha_of('1')));

  // The worker crashes at 25: the steps since the checkpoint of 23 are paid twice.
  const std::string pool = j.pool;
  l.result(pool, j, msg::outcome::transient, 1, 25);
  CHECK(j.gpu_s_redone == Approx((25 - 23) * 8));
  REQUIRE(j.state == actors::coordinator::job_state::sampling);  // ordered again at once (no backoff)
  REQUIRE(l.orders().size() == 1);
  CHECK(l.orders()[0].resume.step == 25);
  CHECK(l.orders()[0].resume.sha256 == sha_of('3'));
  CHECK(l.orders()[0].resume.host == "a");
  CHECK(j.resumed_step == 25);

  // Journaled: read back whole; a record written before checkpoints reads as none.
  auto rec = actors::coordinator::job_record(j);
  auto back = actors::coordinator::job_from_record(rec);
  REQUIRE(back.checkpoints.size() == 2);
  CHECK(back.checkpoints.back().ref.sha256 == sha_of('3'));
  CHECK(back.checkpoints.back().kind == "k");
  CHECK(back.checkpoints.back().ref.made_unix_s == Approx(23));
  CHECK(back.resumed_step == 25);
  rec.erase("checkpoints");
  rec.erase("resumed_step");
  auto old = actors::coordinator::job_from_record(rec);
  CHECK(old.checkpoints.empty());
  CHECK(old.checkpoint_floor == 0);

  // Its latent made: every checkpoint released, none kept.
  l.result(j.pool, j, msg::outcome::ok, 26, 30);
  CHECK(j.state == actors::coordinator::job_state::sampled);
  CHECK(j.checkpoints.empty());
  CHECK(has(l.released(), sha_of('2')));
  CHECK(has(l.released(), sha_of('3')));
}

TEST_CASE("checkpoints: one that did not verify is dropped and the one before it used") {
  line l({{"p0", "a", "k"}});
  l.report("p0", 0);
  l.submit("r1", 1, 0);
  auto& j = l.job("r1");
  const uint64_t a = j.attempt;
  l.report("p0", 5, a, {ckpt(10, '1', "a", 4, a), ckpt(20, '2', "a", 5, a)});
  l.result("p0", j, msg::outcome::transient, 0, 6);
  REQUIRE(l.orders().size() == 1);
  CHECK(l.orders()[0].resume.step == 20);
  // The resume checkpoint hashed otherwise on the pool.
  l.result("p0", j, msg::outcome::transient, 6, 7, {}, sha_of('2'));
  CHECK(has(l.released(), sha_of('2')));
  REQUIRE(l.orders().size() == 1);
  CHECK(l.orders()[0].resume.step == 10);
  CHECK(l.orders()[0].resume.sha256 == sha_of('1'));
}

TEST_CASE("checkpoints: out of memory moves the job to a bigger kind from step 0") {
  line l({{"small", "a", "k"}, {"big", "a", "k2"}});
  l.report("small", 0);
  l.submit("r1", 1, 0);  // only "small" has reported: it takes the job
  auto& j = l.job("r1");
  REQUIRE(j.pool == "small");
  const uint64_t a = j.attempt;
  l.report("small", 5, a, {ckpt(10, '1', "a", 4, a)});
  l.report("big", 5);
  l.result("small", j, msg::outcome::capacity, 0, 6);
  CHECK(has(l.released(), sha_of('1')));
  REQUIRE(l.orders().size() == 1);
  CHECK(l.orders()[0].pool == "big");
  CHECK(l.orders()[0].resume.step == 0);
  CHECK(j.checkpoint_floor > a);
  // The old attempt's checkpoint, still on its host, is released when the host reports it.
  msg::latent_holdings h;
  h.host = "a";
  h.latents.push_back(msg::latent_held{sha_of('1'), 1000, "r1", 0, 10, a});
  l.step(actors::coordinator::ev_latent_holdings{h}, 7);
  CHECK(has(l.released(), sha_of('1')));
}

TEST_CASE("checkpoints: a job whose checkpoint's host is down waits for it, then resumes on "
          "another pool of the same kind from it, or from step 0 once it stayed down") {
  for (bool returns : {true, false}) {
    DYNAMIC_SECTION((returns ? "the host returns" : "the host stays down")) {
      line l({{"p0", "a", "k"}, {"p1", "c", "k"}});
      l.report("p0", 0);
      l.submit("r1", 1, 0);
      auto& j = l.job("r1");
      REQUIRE(j.pool == "p0");
      const uint64_t a = j.attempt;
      l.report("p0", 5, a, {ckpt(12, '1', "a", 5, a)});
      l.report("p1", 5);
      l.step(actors::coordinator::ev_peer{"a", false}, 6);
      // The lease runs out: the job is queued again, and waits for host a.
      for (double t = 7; t <= 12; t += 1)
        l.step(actors::coordinator::ev_tick{}, t);
      REQUIRE(j.state == actors::coordinator::job_state::queued);
      CHECK(j.retry_at == Approx(6 + l.s.p.latent_wait_s));
      if (returns) {
        l.step(actors::coordinator::ev_peer{"a", true}, 13);
        REQUIRE(l.orders().size() == 1);
        CHECK(l.orders()[0].pool == "p1");  // p0 has not reported since its host returned
        CHECK(l.orders()[0].resume.step == 12);
        CHECK(l.orders()[0].resume.host == "a");  // p1 pulls it by digest from a
      } else {
        for (double t = 13; t <= 6 + l.s.p.latent_wait_s + 1 && l.orders().empty(); t += 1)
          l.step(actors::coordinator::ev_tick{}, t);
        REQUIRE(l.orders().size() == 1);
        CHECK(l.orders()[0].pool == "p1");
        CHECK(l.orders()[0].resume.step == 0);  // nothing reachable to go on from
      }
    }
  }
}

TEST_CASE("checkpoints: what a host holds is kept, adopted or released") {
  line l({{"p0", "a", "k"}});
  l.report("p0", 0);
  l.submit("r1", 1, 0);
  auto& j = l.job("r1");
  const uint64_t a = j.attempt;
  l.report("p0", 5, a, {ckpt(10, '1', "a", 5, a)});
  msg::latent_holdings h;
  h.host = "a";
  h.latents.push_back(msg::latent_held{sha_of('1'), 1000, "r1", 0, 10, a});   // kept
  h.latents.push_back(msg::latent_held{sha_of('0'), 1000, "r1", 0, 5, a});    // older
  h.latents.push_back(msg::latent_held{sha_of('2'), 1000, "r1", 0, 15, a});   // not reported yet
  h.latents.push_back(msg::latent_held{sha_of('9'), 1000, "gone", 0, 15, 1}); // no such run
  l.step(actors::coordinator::ev_latent_holdings{h}, 6);
  auto rel = l.released();
  CHECK_FALSE(has(rel, sha_of('1')));
  CHECK(has(rel, sha_of('0')));
  CHECK_FALSE(has(rel, sha_of('2')));  // the attempt runs: its pool will report it
  CHECK(has(rel, sha_of('9')));
  CHECK(j.checkpoints.size() == 1);
  // The attempt ends before its report: the host's newer checkpoint is adopted.
  l.step(actors::coordinator::ev_peer{"a", false}, 7);
  for (double t = 8; t <= 12 && j.state == actors::coordinator::job_state::sampling; t += 1)
    l.step(actors::coordinator::ev_tick{}, t);
  REQUIRE(j.state == actors::coordinator::job_state::queued);
  l.step(actors::coordinator::ev_peer{"a", true}, 13);  // p0 has not reported since: nothing ordered
  REQUIRE(j.state == actors::coordinator::job_state::queued);
  l.step(actors::coordinator::ev_latent_holdings{h}, 14);
  CHECK(l.persisted("r1"));
  REQUIRE(j.checkpoints.size() == 2);
  CHECK(j.checkpoints.back().ref.step == 15);
  CHECK(j.checkpoints.back().ref.host == "a");
}

TEST_CASE("preemption: a job of a higher priority by the gap makes a sampling job with a "
          "recent checkpoint stop, it resumes from it later, never thrashing") {
  line l({{"p0", "a", "k"}});
  l.s.p.checkpoint_interval_s = 60;
  SECTION("off by default") {
    l.report("p0", 0);
    l.submit("low", 1, 0);
    const uint64_t a = l.job("low").attempt;
    l.report("p0", 5, a, {ckpt(10, '1', "a", 5, a)});
    l.submit("high", 1, 6, 100);
    CHECK(l.preempts().empty());
    CHECK(l.s.pools["p0"].preempt_attempt == 0);
  }
  SECTION("on") {
    l.s.p.preempt_priority_gap = 10;
    l.report("p0", 0);
    l.submit("low", 1, 0);
    auto& low = l.job("low");
    const uint64_t a = low.attempt;
    l.submit("mid", 1, 1, 9);  // below the gap: waits its turn
    CHECK(l.preempts().empty());
    l.submit("early", 1, 2, 50);  // no checkpoint yet: stopping it would lose its work
    CHECK(l.preempts().empty());
    l.report("p0", 5, a, {ckpt(10, '1', "a", 5, a)});
    // Reported now: the priority-50 run waiting makes it stop.
    REQUIRE(l.preempts() == std::vector<uint64_t>{a});
    l.report("p0", 6, a);
    CHECK(l.preempts() == std::vector<uint64_t>{a});  // repeated while it runs
    // It stops at its next step with a checkpoint.
    l.result("p0", low, msg::outcome::preempted, 0, 7, {ckpt(11, '2', "a", 6.5, a)});
    CHECK(low.state == actors::coordinator::job_state::queued);
    CHECK(low.preemptions == 1);
    CHECK(low.sample_attempts == 0);  // not the job's fault
    CHECK(low.gpu_s_redone == Approx(0.5 * 8));
    REQUIRE(l.orders().size() == 1);
    CHECK(l.orders()[0].job.run_id == "early");
    // The priority-50 job done: the next in priority order (mid), then low resumes.
    auto& early = l.job("early");
    l.result("p0", early, msg::outcome::ok, 7, 20);
    REQUIRE(l.orders().size() == 1);
    CHECK(l.orders()[0].job.run_id == "mid");
    l.result("p0", l.job("mid"), msg::outcome::ok, 20, 30);
    REQUIRE(l.orders().size() == 1);
    CHECK(l.orders()[0].job.run_id == "low");
    CHECK(l.orders()[0].resume.step == 11);
    // Asked once within its stage time: a second high run does not stop it again.
    const uint64_t b = low.attempt;
    l.report("p0", 31, b, {ckpt(15, '3', "a", 31, b)});
    l.submit("high2", 1, 32, 100);
    CHECK(l.preempts().empty());
  }
}

TEST_CASE("pool machine: checkpoints reported in status and result, preempt asked once") {
  actors::pool::state p;
  p.pool = "p0";
  p.host = "a";
  p.epoch = 7;
  msg::sample_order o;
  o.pool = "p0";
  o.attempt = 42;
  o.job.run_id = "r1";
  actors::pool::step(p, actors::pool::ev_order{o}, 0);
  actors::pool::step(p, actors::pool::ev_conditioned{42, true, "/c", 0, ""}, 1);
  // Late or foreign ones change nothing.
  CHECK(actors::pool::step(p, actors::pool::ev_checkpoint{41, ckpt(3, '1', "a", 2, 41)}, 2).empty());
  auto fx = actors::pool::step(p, actors::pool::ev_checkpoint{42, ckpt(3, '1', "a", 2, 42)}, 2);
  CHECK(std::holds_alternative<actors::pool::fx_report>(fx.at(0)));
  actors::pool::step(p, actors::pool::ev_checkpoint{42, ckpt(6, '2', "a", 3, 42)}, 3);
  actors::pool::step(p, actors::pool::ev_checkpoint{42, ckpt(9, '3', "a", 4, 42)}, 4);
  auto st = p.status(5);
  REQUIRE(st.checkpoints.size() == actors::pool::checkpoints_reported);
  CHECK(st.checkpoints.back().step == 9);
  msg::lease_grant g;
  g.target = "p0";
  g.epoch = 7;
  g.seq = st.seq;
  g.current = {42};
  g.preempt = {42};
  g.lease_ms = 3000;
  fx = actors::pool::step(p, actors::pool::ev_grant{g, 5}, 5);
  CHECK(std::any_of(fx.begin(), fx.end(), [](const actors::pool::effect& e) {
    return std::holds_alternative<actors::pool::fx_preempt_stage>(e);
  }));
  fx = actors::pool::step(p, actors::pool::ev_grant{g, 5.5}, 5.5);
  CHECK(std::none_of(fx.begin(), fx.end(), [](const actors::pool::effect& e) {
    return std::holds_alternative<actors::pool::fx_preempt_stage>(e);
  }));
  actors::pool::ev_sampled d;
  d.attempt = 42;
  d.outcome = msg::outcome::preempted;
  actors::pool::step(p, d, 6);
  REQUIRE(p.unacked.size() == 1);
  CHECK(p.unacked[0].outcome == msg::outcome::preempted);
  REQUIRE(p.unacked[0].checkpoints.size() == 2);
  CHECK(p.unacked[0].checkpoints.back().sha256 == sha_of('3'));
  CHECK(p.status().checkpoints.empty());  // idle: nothing of an attempt running
}

TEST_CASE("latent store: a released checkpoint goes at once, a latent after its retention") {
  actors::latents::state s;
  s.host = "a";
  s.retention_s = 100;
  actors::latents::ev_scan scan;
  scan.files[sha_of('c')] = actors::latents::file{10, "r1", 0, 4, 7};
  scan.files[sha_of('l')] = actors::latents::file{10, "r1", 0, 0, 0};
  auto fx = actors::latents::step(s, scan, 0);
  auto& h = std::get<actors::latents::fx_report>(fx.at(0)).h;
  REQUIRE(h.latents.size() == 2);
  CHECK(h.latents[0].checkpoint_step == 4);
  CHECK(h.latents[0].attempt == 7);
  fx = actors::latents::step(s, actors::latents::ev_release{{sha_of('c'), sha_of('l')}}, 1);
  REQUIRE(fx.size() == 1);
  CHECK(std::get<actors::latents::fx_remove>(fx[0]).sha256 == sha_of('c'));
  CHECK(s.latents.count(sha_of('l')) == 1);
}
