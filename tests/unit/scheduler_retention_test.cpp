// Retention: a finished run leaves the scheduler's state finished_run_memory_s
// after it finished, and the journal journal_keep_finished_s after (fx_drop_runs); the
// index stays consistent, a late message naming a forgotten run's job is acknowledged and
// counted and brings nothing back, forgetting moves no job's home, and a resume recalls a
// forgotten run from its journal records.
#include <catch2/catch.hpp>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;
using sched_fixtures::run_of;
using sched_fixtures::sample_ok;

namespace {

uint64_t seq = 1;

std::vector<actors::coordinator::effect> idle(actors::coordinator::state& s, const std::string& pool, double now) {
  return actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report(pool, 7, ++seq)}, now);
}

std::vector<actors::coordinator::effect> decoder_report(actors::coordinator::state& s, double now) {
  msg::decoder_status st;
  st.decoder = "dec";
  st.host = "b";
  st.epoch = 9;
  st.seq = ++seq;
  st.capacity = 2;
  return actors::coordinator::step(s, actors::coordinator::ev_decoder_status{st}, now);
}

msg::decode_result decode_ok(const actors::coordinator::job& j) {
  msg::decode_result r;
  r.decoder = "dec";
  r.host = "b";
  r.attempt = j.attempt;
  r.run_id = j.spec.run_id;
  r.index = j.spec.index;
  r.outcome = msg::outcome::ok;
  r.output = "/out/" + j.spec.run_id + "/" + std::to_string(j.spec.index) + ".mp4";
  r.output_sha256 = std::string(64, 'f');
  return r;
}

/// Job `index` of `run` is sampling: its result comes (ok, or `outcome`), then (ok) its
/// decode goes through. At `now`.
void finish_job(actors::coordinator::state& s, const std::string& run, uint32_t index, double now,
                const std::string& outcome = msg::outcome::ok) {
  auto* j = s.find_job(run, index);
  REQUIRE(j != nullptr);
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  auto r = sample_ok(*j);
  r.outcome = outcome;
  if (outcome != msg::outcome::ok)
    r.error = "broken";
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{r}, now);
  if (outcome != msg::outcome::ok)
    return;
  decoder_report(s, now);
  j = s.find_job(run, index);
  REQUIRE(j->state == actors::coordinator::job_state::decoding);
  actors::coordinator::step(s, actors::coordinator::ev_decode_result{decode_ok(*j)}, now);
  REQUIRE(s.find_job(run, index)->state == actors::coordinator::job_state::succeeded);
}

std::vector<std::string> dropped(const std::vector<actors::coordinator::effect>& fx) {
  std::vector<std::string> out;
  for (auto& e : fx)
    if (auto* d = std::get_if<actors::coordinator::fx_drop_runs>(&e))
      out.insert(out.end(), d->run_ids.begin(), d->run_ids.end());
  return out;
}

/// A run as the journal gives it back (records round trip).
actors::coordinator::run as_journaled(const actors::coordinator::run& r) {
  auto back = actors::coordinator::run_from_record(actors::coordinator::run_record(r));
  for (auto& j : r.jobs)
    back.jobs.push_back(actors::coordinator::job_from_record(actors::coordinator::job_record(j)));
  return back;
}

} // namespace

TEST_CASE("a finished run leaves the state finished_run_memory_s after it finished") {
  auto s = line_of(1);
  s.p.finished_run_memory_s = 100;
  idle(s, "p0", 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("open", 2)}, 1);
  finish_job(s, "r", 0, 10);
  REQUIRE(s.find_run("r")->done);
  REQUIRE(s.find_run("r")->finished_at == 10);
  // "open" now samples on p0; not finished, never forgotten.
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 109.9);
  CHECK(s.find_run("r") != nullptr);
  CHECK(s.runs_forgotten == 0);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 110);
  CHECK(s.find_run("r") == nullptr);
  CHECK(s.runs.size() == 1);
  CHECK(s.runs_forgotten == 1);
  CHECK(actors::coordinator::check_index(s).empty());
  // The open run goes on as before: its sampling job is the pool's, the rest queued.
  auto* j0 = s.find_job("open", 0);
  REQUIRE(j0 != nullptr);
  CHECK(j0->state == actors::coordinator::job_state::sampling);
  CHECK(s.pools.at("p0").assigned == std::make_pair(std::string("open"), uint32_t{0}));
  finish_job(s, "open", 0, 200);
  CHECK(s.find_job("open", 1)->state == actors::coordinator::job_state::sampling);
  finish_job(s, "open", 1, 210);
  CHECK(s.find_run("open")->done);
  CHECK(actors::coordinator::check_index(s).empty());
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 310);
  CHECK(s.runs.empty());
  CHECK(s.runs_forgotten == 2);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("memory 0: the run is forgotten at the next tick, after its final records went out") {
  auto s = line_of(1);
  s.p.finished_run_memory_s = 0;
  idle(s, "p0", 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  auto* j = s.find_job("r", 0);
  auto r = sample_ok(*j);
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{r}, 1);
  decoder_report(s, 1);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_decode_result{decode_ok(*s.find_job("r", 0))}, 2);
  // The step that finished it journals it, and the run is still here for the shell to write.
  bool run_persisted = false;
  for (auto& e : fx)
    if (auto* p = std::get_if<actors::coordinator::fx_persist_run>(&e))
      run_persisted = run_persisted || p->run_id == "r";
  CHECK(run_persisted);
  REQUIRE(s.find_run("r") != nullptr);
  CHECK(s.find_run("r")->done);
  // A status between is no tick: nothing is forgotten there.
  idle(s, "p0", 2);
  CHECK(s.find_run("r") != nullptr);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 2);
  CHECK(s.find_run("r") == nullptr);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a late message for a forgotten run's job is acknowledged, counted, and revives nothing") {
  auto s = line_of(2);
  s.p.finished_run_memory_s = 5;
  idle(s, "p0", 0);
  idle(s, "p1", 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("old", 2)}, 0);
  // Job 1's first attempt is lost on p1 (restarted), job 1 runs again on p1 and finishes:
  // the first attempt's result comes late, after the run was forgotten.
  auto* j1 = s.find_job("old", 1);
  auto first = sample_ok(*j1);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report("p1", 8, ++seq)}, 1);
  REQUIRE(s.find_job("old", 1)->state == actors::coordinator::job_state::sampling);
  REQUIRE(s.find_job("old", 1)->attempt != first.attempt);
  finish_job(s, "old", 0, 2);
  finish_job(s, "old", 1, 3);
  auto decoded = decode_ok(*s.find_job("old", 1));
  REQUIRE(s.find_run("old")->done);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("new", 1)}, 4);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 8);
  REQUIRE(s.find_run("old") == nullptr);
  REQUIRE(s.find_run("new") != nullptr);

  // The late sample result, alone and inside a status report: acknowledged, nothing else.
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{first}, 9);
  REQUIRE(fx.size() == 1);
  CHECK(std::holds_alternative<actors::coordinator::fx_ack>(fx[0]));
  auto st = sched_fixtures::pool_report("p1", 8, ++seq, first.attempt);
  st.unacked.push_back(first);
  fx = actors::coordinator::step(s, actors::coordinator::ev_pool_status{st}, 9);
  bool ended = false;
  for (auto& e : fx) {
    CHECK(!std::holds_alternative<actors::coordinator::fx_persist_job>(e));
    CHECK(!std::holds_alternative<actors::coordinator::fx_persist_run>(e));
    if (auto* g = std::get_if<actors::coordinator::fx_grant>(&e))
      ended = g->grant.ended == std::vector<uint64_t>{first.attempt} && g->grant.current.empty();
  }
  CHECK(ended);  // the pool is told the attempt holds no lease
  // A decode result resent by the decoder, alone and in its report.
  fx = actors::coordinator::step(s, actors::coordinator::ev_decode_result{decoded}, 10);
  REQUIRE(fx.size() == 1);
  CHECK(std::holds_alternative<actors::coordinator::fx_ack>(fx[0]));
  CHECK(s.unknown_job_results == 3);
  msg::decoder_status ds;
  ds.decoder = "dec";
  ds.host = "b";
  ds.epoch = 9;
  ds.seq = ++seq;
  ds.holding = {decoded.attempt};
  ds.unacked = {decoded};
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{ds}, 10);
  CHECK(s.unknown_job_results == 4);
  // The latents actor reports a latent of it.
  msg::latent_holdings h;
  h.host = "a";
  h.epoch = 1;
  h.seq = 1;
  h.latents.push_back({first.latent_sha256, 1000, "old", 1});
  actors::coordinator::step(s, actors::coordinator::ev_latent_holdings{h}, 11);
  // A cancel of it, a resume without its records: nothing.
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"old", std::nullopt}, 11);
  actors::coordinator::step(s, actors::coordinator::ev_resume{"old", std::nullopt}, 11);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 12);
  CHECK(s.find_run("old") == nullptr);
  CHECK(s.runs.size() == 1);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("forgetting moves no job's home: in_turn's rotation goes on after forgotten runs") {
  auto drive = [](double memory) {
    auto s = line_of(3);
    s.p.finished_run_memory_s = memory;
    // Two 1-job runs, cancelled before any pool reports (turns 0 and 1 are theirs).
    actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("a", 1)}, 0);
    actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("b", 1)}, 0);
    actors::coordinator::step(s, actors::coordinator::ev_cancel{"a", std::nullopt}, 1);
    actors::coordinator::step(s, actors::coordinator::ev_cancel{"b", std::nullopt}, 1);
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, 5);
    actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("c", 4)}, 6);
    std::map<uint32_t, std::string> pool_of;
    for (auto p : {"p0", "p1", "p2"})
      for (auto& e : idle(s, p, 7))
        if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
          pool_of[o->order.job.index] = o->order.pool;
    CHECK(actors::coordinator::check_index(s).empty());
    return std::make_pair(pool_of, s.runs.size());
  };
  auto [kept, kept_runs] = drive(-1);
  auto [forgot, forgot_runs] = drive(0);
  CHECK(kept_runs == 3);
  CHECK(forgot_runs == 1);
  CHECK(kept == forgot);
  // Job 0 of "c" has turn 2: it is p2's.
  CHECK(forgot[0] == "p2");
}

TEST_CASE("the journal drops a run journal_keep_finished_s after it finished, once") {
  auto s = line_of(1);
  s.p.finished_run_memory_s = 10;
  s.p.journal_keep_finished_s = 50;
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("q", 1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", std::nullopt}, 1);  // finished at 1
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"q", std::nullopt}, 3);  // finished at 3
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 11)).empty());
  CHECK(s.find_run("r") == nullptr);
  CHECK(s.find_run("q") != nullptr);
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 13)).empty());
  CHECK(s.journaled.size() == 2);
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 50.9)).empty());
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 51)) == std::vector<std::string>{"r"});
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 52)).empty());
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 60)) == std::vector<std::string>{"q"});
  CHECK(s.journaled.empty());
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1000)).empty());
  CHECK(actors::coordinator::check_index(s).empty());

  SECTION("a journal kept forever is told nothing and the state keeps no list") {
    auto k = line_of(1);
    k.p.finished_run_memory_s = 0;
    k.p.journal_keep_finished_s = -1;
    actors::coordinator::step(k, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
    actors::coordinator::step(k, actors::coordinator::ev_cancel{"r", std::nullopt}, 1);
    CHECK(dropped(actors::coordinator::step(k, actors::coordinator::ev_tick{}, 2)).empty());
    CHECK(k.find_run("r") == nullptr);
    CHECK(k.journaled.empty());
    CHECK(dropped(actors::coordinator::step(k, actors::coordinator::ev_tick{}, 1e9)).empty());
  }
}

TEST_CASE("a restarted coordinator forgets the finished runs it loaded, and drops them later") {
  // What a journal gives back after a restart: a run finished long ago, one finished lately,
  // one open.
  auto before = line_of(1);
  actors::coordinator::step(before, actors::coordinator::ev_submit{run_of("long_ago", 1)}, 0);
  actors::coordinator::step(before, actors::coordinator::ev_submit{run_of("lately", 1)}, 0);
  actors::coordinator::step(before, actors::coordinator::ev_submit{run_of("open", 1)}, 0);
  actors::coordinator::step(before, actors::coordinator::ev_cancel{"long_ago", std::nullopt}, 1);
  actors::coordinator::step(before, actors::coordinator::ev_cancel{"lately", std::nullopt}, 900);
  auto s = line_of(1);
  s.p.finished_run_memory_s = 100;
  s.p.journal_keep_finished_s = 500;
  for (auto& r : before.runs)
    s.runs.push_back(as_journaled(r));
  actors::coordinator::reindex(s);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_tick{}, 999);
  CHECK(s.find_run("long_ago") == nullptr);
  CHECK(s.find_run("lately") != nullptr);
  CHECK(s.find_run("open") != nullptr);
  CHECK(dropped(fx) == std::vector<std::string>{"long_ago"});  // finished 998 s ago
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1000)).empty());
  CHECK(s.find_run("lately") == nullptr);  // forgotten 100 s after it finished
  CHECK(s.find_run("open") != nullptr);
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1399.5)).empty());
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1400)) == std::vector<std::string>{"lately"});
  CHECK(s.journaled.empty());
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("resume of a forgotten run with failed jobs recalls it from its journal records") {
  auto s = line_of(1);
  s.p.finished_run_memory_s = 0;
  s.p.journal_keep_finished_s = 100;
  idle(s, "p0", 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 2)}, 0);
  finish_job(s, "r", 0, 1);
  finish_job(s, "r", 1, 2, msg::outcome::fatal);
  REQUIRE(s.find_run("r")->done);
  REQUIRE(s.find_job("r", 1)->state == actors::coordinator::job_state::failed);
  const auto journaled = as_journaled(*s.find_run("r"));
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("other", 1)}, 3);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 3);
  REQUIRE(s.find_run("r") == nullptr);
  REQUIRE(s.journaled.size() == 1);

  auto fx = actors::coordinator::step(s, actors::coordinator::ev_resume{"r", journaled}, 4);
  auto* r = s.find_run("r");
  REQUIRE(r != nullptr);
  CHECK(!r->done);
  CHECK(r->jobs.size() == 2);
  CHECK(r->jobs[0].state == actors::coordinator::job_state::succeeded);
  CHECK(r->jobs[1].state == actors::coordinator::job_state::queued);
  CHECK(s.runs.back().id == "r");  // behind the runs here
  CHECK(s.journaled.empty());      // in the state again: not dropped while it is here
  bool persisted = false;
  for (auto& e : fx)
    if (auto* p = std::get_if<actors::coordinator::fx_persist_job>(&e))
      persisted = persisted || (p->run_id == "r" && p->index == 1);
  CHECK(persisted);
  CHECK(actors::coordinator::check_index(s).empty());
  // It runs after "other" and finishes; forgotten again, dropped keep_s after that.
  finish_job(s, "other", 0, 5);
  finish_job(s, "r", 1, 6);
  CHECK(s.find_run("r")->done);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 7);
  CHECK(s.find_run("r") == nullptr);
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 105.9)) == std::vector<std::string>{"other"});
  CHECK(dropped(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 106)) == std::vector<std::string>{"r"});
  CHECK(actors::coordinator::check_index(s).empty());

  SECTION("a forgotten run without failed jobs, or cancelled, is not recalled") {
    auto t = line_of(1);
    t.p.finished_run_memory_s = 0;
    actors::coordinator::step(t, actors::coordinator::ev_submit{run_of("c", 1)}, 0);
    actors::coordinator::step(t, actors::coordinator::ev_cancel{"c", std::nullopt}, 1);
    auto cancelled = as_journaled(*t.find_run("c"));
    actors::coordinator::step(t, actors::coordinator::ev_tick{}, 2);
    REQUIRE(t.find_run("c") == nullptr);
    actors::coordinator::step(t, actors::coordinator::ev_resume{"c", cancelled}, 3);
    CHECK(t.find_run("c") == nullptr);
    auto ok = journaled;
    ok.id = "ok";
    for (auto& j : ok.jobs) {
      j.spec.run_id = "ok";
      j.state = actors::coordinator::job_state::succeeded;
    }
    actors::coordinator::step(t, actors::coordinator::ev_resume{"ok", ok}, 3);
    CHECK(t.find_run("ok") == nullptr);
    // Records that do not name the run asked for are not taken.
    actors::coordinator::step(t, actors::coordinator::ev_resume{"other", journaled}, 3);
    CHECK(t.find_run("r") == nullptr);
    CHECK(t.runs.empty());
    CHECK(actors::coordinator::check_index(t).empty());
  }
}

TEST_CASE("forgetting a run before others keeps the index of those in flight consistent") {
  // A sampled job waiting for a decoder and a job backing off sit in the index by run
  // position: forgetting the run before them moves them.
  auto s = line_of(2);
  s.p.finished_run_memory_s = 0;
  s.p.retry_backoff_s = 50;
  idle(s, "p0", 0);
  idle(s, "p1", 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("first", 1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("second", 2)}, 0);
  // first/0 on p0, second/0 on p1. second/0 fails transiently (backs off), first/0 ends.
  auto* b = s.find_job("second", 0);
  REQUIRE(b->state == actors::coordinator::job_state::sampling);
  auto tr = sample_ok(*b);
  tr.outcome = msg::outcome::transient;
  tr.error = "disk full";
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{tr}, 1);
  REQUIRE(s.find_job("second", 0)->retry_at > 1);
  finish_job(s, "first", 0, 2);
  // second/1 went to a free pool; its latent comes, no decoder credit (the decoder holds
  // nothing but reports capacity 1 and one held attempt).
  auto* c = s.find_job("second", 1);
  REQUIRE(c->state == actors::coordinator::job_state::sampling);
  msg::decoder_status full;
  full.decoder = "dec";
  full.host = "b";
  full.epoch = 9;
  full.seq = ++seq;
  full.capacity = 1;
  full.holding = {999999};
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{full}, 3);
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{sample_ok(*s.find_job("second", 1))}, 3);
  REQUIRE(s.find_job("second", 1)->state == actors::coordinator::job_state::sampled);
  CHECK(actors::coordinator::check_index(s).empty());
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 4);
  REQUIRE(s.find_run("first") == nullptr);
  CHECK(actors::coordinator::check_index(s).empty());
  // The decoder frees up: the sampled job is ordered; the backoff ends and it samples again.
  decoder_report(s, 5);
  CHECK(s.find_job("second", 1)->state == actors::coordinator::job_state::decoding);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 60);
  CHECK(s.find_job("second", 0)->state == actors::coordinator::job_state::sampling);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a latent naming a forgotten run stays while the journal holds the run, then goes") {
  auto s = line_of(1);
  s.p.finished_run_memory_s = 10;
  s.p.journal_keep_finished_s = 50;
  actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r", std::nullopt}, 1);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 11);
  REQUIRE(s.find_run("r") == nullptr);
  auto holdings = [&](const std::string& run, double now) {
    msg::latent_holdings h;
    h.host = "a";
    h.epoch = 3;
    h.seq = ++seq;
    h.latents.push_back(msg::latent_held{std::string(64, 'c'), 1000, run, 0});
    std::vector<std::string> released;
    for (auto& e : actors::coordinator::step(s, actors::coordinator::ev_latent_holdings{h}, now))
      if (auto* r = std::get_if<actors::coordinator::fx_release>(&e))
        released.insert(released.end(), r->sha256s.begin(), r->sha256s.end());
    return released;
  };
  CHECK(holdings("r", 12).empty());  // forgotten, still journaled: a resume may want it
  CHECK(holdings("never-submitted", 12) == std::vector<std::string>{std::string(64, 'c')});
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 51);  // the journal drops r
  CHECK(holdings("r", 52) == std::vector<std::string>{std::string(64, 'c')});
}
