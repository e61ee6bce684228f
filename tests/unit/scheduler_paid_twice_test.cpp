// Faults paid twice, counted and undone: a video published but never acknowledged, and the
// GPU-seconds of sampling redone.
//
// A video published but never acknowledged: its decoder committed it while the coordinator
// was down, then the decoder's host was killed and stayed down past its lease, and the
// restarted coordinator had the job decoded elsewhere. When the host returns, the kept
// result is reported again (decoder_machine.hpp, ev_recovered): the coordinator adopts it
// if the job still waits for a video, else the decoder removes it (with its index line)
// and both count it. The real decoder machines of both decoders and the scheduler, on
// virtual time, the coordinator restarted from its journal's records.
#include <catch2/catch.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/decoder/decoder_machine.hpp"
#include "tests/support/effects.hpp"

using namespace vidline;
using testing_support::all_of;

namespace {

/// One pool on host a, decoders db on host b and dc on host c.
actors::coordinator::state line() {
  actors::coordinator::state s;
  actors::coordinator::pool_view p;
  p.name = "p";
  p.host = "a";
  p.kind = "k";
  s.pools["p"] = p;
  for (auto [name, host] : {std::pair{"db", "b"}, std::pair{"dc", "c"}}) {
    actors::coordinator::decoder_view d;
    d.name = name;
    d.host = host;
    d.kind = "dk";
    s.decoders[name] = d;
  }
  s.modes["m"] = {"p"};
  s.mode_decoders["m"] = {"db", "dc"};
  s.p.lease_s = 3;
  return s;
}

actors::decoder::state decoder(const std::string& name, const std::string& host, uint64_t epoch) {
  actors::decoder::state d;
  d.decoder = name;
  d.host = host;
  d.epoch = epoch;
  return d;
}

/// The coordinator's process restarted: a fresh state from the journal's records of the
/// runs, in flight stages adopted as the shell does at start.
actors::coordinator::state restarted(const actors::coordinator::state& old, double now, double mono) {
  auto s = line();
  for (auto& r : old.runs) {
    auto copy = actors::coordinator::run_from_record(actors::coordinator::run_record(r));
    copy.jobs.clear();
    for (auto& j : r.jobs)
      copy.jobs.push_back(actors::coordinator::job_from_record(actors::coordinator::job_record(j)));
    s.runs.push_back(std::move(copy));
  }
  s.next_attempt = old.next_attempt;
  actors::coordinator::reindex(s);
  actors::coordinator::adopt_in_flight(s, now, mono);
  return s;
}

/// A decoder's status report reaches the coordinator; what it answers goes back to that
/// decoder (grant, acks). Returns the decoder's effects.
std::vector<actors::decoder::effect> report(actors::coordinator::state& s, actors::decoder::state& d, double t,
                                     std::vector<actors::coordinator::effect>* sfx = nullptr) {
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_decoder_status{d.status(t)}, t, t);
  if (sfx != nullptr)
    *sfx = fx;
  std::vector<actors::decoder::effect> out;
  auto take = [&](std::vector<actors::decoder::effect> more) {
    out.insert(out.end(), more.begin(), more.end());
  };
  for (auto& g : all_of<actors::coordinator::fx_grant>(fx))
    if (g.grant.target == d.decoder)
      take(actors::decoder::step(d, actors::decoder::ev_grant{g.grant, t}, t));
  for (auto& a : all_of<actors::coordinator::fx_ack>(fx))
    if (a.target == "decoder:" + d.decoder)
      take(actors::decoder::step(d, actors::decoder::ev_ack{a.attempt, a.discard}, t));
  return out;
}

/// `d` takes `o`, fetches and decodes it within its lease: the video is published
/// (fx_commit). Returns the commit.
actors::decoder::fx_commit decode(actors::coordinator::state& s, actors::decoder::state& d, const msg::decode_order& o,
                           double t) {
  actors::decoder::step(d, actors::decoder::ev_order{o}, t);
  report(s, d, t);  // the grant: a lease from now
  actors::decoder::step(d, actors::decoder::ev_fetched{o.attempt, msg::outcome::ok, ""}, t + 0.1);
  actors::decoder::ev_decoded e;
  e.attempt = o.attempt;
  e.outcome = msg::outcome::ok;
  e.output = "/data/" + d.host + "/outputs/r1/job-0-100.mp4";
  e.output_sha256 = std::string(64, 'c');
  e.staged = "/data/" + d.host + "/outputs/r1/.staged-job-0-100.mp4";
  e.decode_s = 0.5;
  e.mono_s = t + 0.5;
  auto commits = all_of<actors::decoder::fx_commit>(actors::decoder::step(d, e, t + 0.5));
  REQUIRE(commits.size() == 1);
  return commits.front();
}

/// Job 0 of run r1 sampled on a, ordered to db at t = 10; returns the order.
msg::decode_order ordered_to_b(actors::coordinator::state& s, actors::decoder::state& db, actors::decoder::state& dc) {
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{db.status(0)}, 0, 0);
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{dc.status(0)}, 0, 0);
  msg::pool_status ps;
  ps.pool = "p";
  ps.host = "a";
  ps.epoch = 1;
  ps.seq = 1;
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{ps}, 0, 0);
  actors::coordinator::run r;
  r.id = "r1";
  r.mode = "m";
  actors::coordinator::job j;
  j.spec = msg::job_spec{"r1", 0, 100, 416, 736, 5, "p", "sha-p", ""};
  r.jobs.push_back(j);
  actors::coordinator::step(s, actors::coordinator::ev_submit{r}, 0, 0);
  auto* job = s.find_job("r1", 0);
  msg::sample_result sr;
  sr.pool = "p";
  sr.host = "a";
  sr.attempt = job->attempt;
  sr.run_id = "r1";
  sr.index = 0;
  sr.outcome = msg::outcome::ok;
  sr.latent_sha256 = std::string(64, 'a');
  sr.latent_bytes = 10;
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sr}, 10, 10);
  auto orders = all_of<actors::coordinator::fx_send_decode>(fx);
  REQUIRE(orders.size() == 1);
  REQUIRE(orders.front().host == "b");
  return orders.front().order;
}

} // namespace

TEST_CASE("a video committed unacknowledged, its host killed, the job decoded elsewhere: "
          "retracted and counted when the host returns") {
  auto s = line();
  auto db = decoder("db", "b", 11);
  auto dc = decoder("dc", "c", 12);
  const auto o = ordered_to_b(s, db, dc);
  // The coordinator's host is killed; db publishes its video with nobody to tell.
  const auto commit = decode(s, db, o, 10);
  CHECK(commit.result.attempt == o.attempt);
  CHECK(commit.result.output == commit.output);
  const auto kept = commit.result;  // what the shell keeps on disk until the ack
  REQUIRE(db.unacked.size() == 1);

  // The coordinator restarts; b's host is killed (db's memory gone) and stays down.
  s = restarted(s, 20, 20);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 20, 20);
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{dc.status(20)}, 20, 20);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_tick{}, 24, 24);  // past the lease: moved to dc
  auto* j = s.find_job("r1", 0);
  REQUIRE(j->state == actors::coordinator::job_state::decoding);
  REQUIRE(j->decoder == "dc");
  auto orders = all_of<actors::coordinator::fx_send_decode>(fx);
  REQUIRE(orders.size() == 1);
  const auto winner = decode(s, dc, orders.front().order, 24);
  auto dfx = report(s, dc, 25);
  REQUIRE(j->state == actors::coordinator::job_state::succeeded);
  REQUIRE(j->output == winner.output);
  CHECK(all_of<actors::decoder::fx_forget>(dfx).size() == 1);  // dc's kept result goes with its ack
  CHECK(all_of<actors::decoder::fx_discard>(dfx).empty());

  // b returns: db's new epoch recovers the kept result and reports it.
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 30, 30);
  auto db2 = decoder("db", "b", 99);
  auto rfx = actors::decoder::step(db2, actors::decoder::ev_recovered{{kept}}, 30);
  CHECK(all_of<actors::decoder::fx_report>(rfx).size() == 1);
  REQUIRE(db2.unacked.size() == 1);
  std::vector<actors::coordinator::effect> sfx;
  dfx = report(s, db2, 30, &sfx);
  auto acks = all_of<actors::coordinator::fx_ack>(sfx);
  REQUIRE(acks.size() == 1);
  CHECK(acks.front().discard);
  auto discards = all_of<actors::decoder::fx_discard>(dfx);
  REQUIRE(discards.size() == 1);
  CHECK(discards.front().published);
  CHECK(discards.front().path == commit.output);
  CHECK(discards.front().sha256 == commit.sha256);
  CHECK(discards.front().attempt == o.attempt);
  auto forgets = all_of<actors::decoder::fx_forget>(dfx);
  REQUIRE(forgets.size() == 1);
  CHECK(forgets.front().attempt == o.attempt);
  CHECK(db2.unacked.empty());
  CHECK(db2.retracted == 1);
  // The winner stands; the loser is counted once, however often it is reported.
  CHECK(j->state == actors::coordinator::job_state::succeeded);
  CHECK(j->decoder == "dc");
  CHECK(j->output == winner.output);
  CHECK(j->duplicates == 1);
  CHECK(j->retracted == 1);
  db2 = decoder("db", "b", 100);  // killed again before the ack's removal was done
  actors::decoder::step(db2, actors::decoder::ev_recovered{{kept}}, 31);
  report(s, db2, 31);
  CHECK(j->retracted == 1);
  CHECK(actors::coordinator::summarize(s.runs.front()).done_twice == 1);
  CHECK(actors::coordinator::summarize(s.runs.front()).products_retracted == 1);
  CHECK(actors::coordinator::job_from_record(actors::coordinator::job_record(*j)).retracted == 1);  // journaled
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a video committed unacknowledged whose job still waits for one is adopted") {
  auto s = line();
  auto db = decoder("db", "b", 11);
  auto dc = decoder("dc", "c", 12);
  const auto o = ordered_to_b(s, db, dc);
  const auto kept = decode(s, db, o, 10).result;
  // The coordinator restarts; b and c are both down: the job waits for a decoder.
  s = restarted(s, 20, 20);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 20, 20);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"c", false}, 20, 20);
  auto* j = s.find_job("r1", 0);
  for (double t = 21; t < 40 && j->state == actors::coordinator::job_state::decoding; t += 1)
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, t, t);
  REQUIRE(j->state != actors::coordinator::job_state::decoding);
  REQUIRE(j->state != actors::coordinator::job_state::succeeded);

  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 41, 41);
  auto db2 = decoder("db", "b", 99);
  actors::decoder::step(db2, actors::decoder::ev_recovered{{kept}}, 41);
  std::vector<actors::coordinator::effect> sfx;
  auto dfx = report(s, db2, 41, &sfx);
  CHECK(j->state == actors::coordinator::job_state::succeeded);
  CHECK(j->decoder == "db");
  CHECK(j->output == kept.output);
  CHECK(j->output_sha256 == kept.output_sha256);
  CHECK(j->duplicates == 0);
  CHECK(j->retracted == 0);
  auto acks = all_of<actors::coordinator::fx_ack>(sfx);
  REQUIRE(acks.size() == 1);
  CHECK_FALSE(acks.front().discard);
  CHECK(all_of<actors::decoder::fx_discard>(dfx).empty());
  CHECK(all_of<actors::decoder::fx_forget>(dfx).size() == 1);
  CHECK(db2.unacked.empty());
  CHECK(db2.retracted == 0);
  CHECK(actors::coordinator::summarize(s.runs.front()).products_retracted == 0);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("a recovered result is reported once, whatever else the decoder holds") {
  auto d = decoder("db", "b", 5);
  msg::decode_result r;
  r.decoder = "db";
  r.host = "b";
  r.attempt = 7;
  r.run_id = "r1";
  r.outcome = msg::outcome::ok;
  r.output = "/o/v.mp4";
  r.output_sha256 = std::string(64, 'c');
  auto failed = r;
  failed.attempt = 8;
  failed.outcome = msg::outcome::transient;  // never kept: no product
  actors::decoder::step(d, actors::decoder::ev_recovered{{r, failed}}, 0);
  actors::decoder::step(d, actors::decoder::ev_recovered{{r}}, 0);
  REQUIRE(d.unacked.size() == 1);
  CHECK(d.status().unacked.front().attempt == 7);
  // A resent order of that attempt is not taken again: it is done.
  msg::decode_order o;
  o.attempt = 7;
  o.job.run_id = "r1";
  CHECK(actors::decoder::step(d, actors::decoder::ev_order{o}, 1).empty());
  CHECK(d.holding.empty());
}

// -- GPU-seconds paid twice ----------------------------------------------------------------

/// One job of run r1 sampling at 0 on pool p (8 GPUs, host a), a decoder on host b; `ps`
/// is the pool's status so far (epoch 1, seq 1).
struct sampling_line {
  actors::coordinator::state s = line();
  msg::pool_status ps;
  actors::coordinator::job* j = nullptr;
  sampling_line() {
    s.pools["p"].gpus = 8;
    auto db = decoder("db", "b", 11);
    actors::coordinator::step(s, actors::coordinator::ev_decoder_status{db.status(0)}, 0, 0);
    ps.pool = "p";
    ps.host = "a";
    ps.epoch = 1;
    ps.seq = 1;
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{ps}, 0, 0);
    actors::coordinator::run r;
    r.id = "r1";
    r.mode = "m";
    actors::coordinator::job j0;
    j0.spec = msg::job_spec{"r1", 0, 100, 416, 736, 5, "p", "sha-p", ""};
    r.jobs.push_back(j0);
    actors::coordinator::step(s, actors::coordinator::ev_submit{r}, 0, 0);
    j = s.find_job("r1", 0);
  }
};

TEST_CASE("GPU-seconds paid twice: a failed or lost sampling attempt's span times its GPUs") {
  sampling_line l;
  auto& s = l.s;
  auto& ps = l.ps;
  auto* j = l.j;
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  // A transient failure: its stamps say it ran from 1 to 4 (unix = run clock here).
  msg::sample_result fail;
  fail.pool = "p";
  fail.host = "a";
  fail.attempt = j->attempt;
  fail.run_id = "r1";
  fail.index = 0;
  fail.outcome = msg::outcome::transient;
  fail.error = "worker crashed";
  fail.start_unix_s = 1;
  fail.end_unix_s = 4;
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{fail}, 5, 5);
  CHECK(j->gpu_s_redone == Approx(24));  // 3 s x 8 GPUs
  // Ordered again at 10 (after its backoff), then its host goes silent past the lease:
  // lost, counted from the order until it was given up.
  for (double t = 6; t <= 10 && j->state != actors::coordinator::job_state::sampling; t += 1) {
    ps.seq += 1;
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{ps}, t, t);
  }
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  const double ordered = j->attempt_at;
  actors::coordinator::step(s, actors::coordinator::ev_peer{"a", false}, ordered + 1, ordered + 1);
  for (double t = ordered + 2; t < ordered + 20 && j->state == actors::coordinator::job_state::sampling;
       t += 1)
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, t, t);
  REQUIRE(j->state == actors::coordinator::job_state::queued);
  CHECK(j->gpu_s_redone > 24);
  const double lost = j->gpu_s_redone - 24;
  CHECK(lost == Approx((j->failures.back().end - j->failures.back().start) * 8));
  CHECK(actors::coordinator::summarize(s.runs.front()).gpu_s_paid_twice == Approx(j->gpu_s_redone));
  CHECK(s.gpu_s_redone == Approx(j->gpu_s_redone));
  CHECK(actors::coordinator::job_from_record(actors::coordinator::job_record(*j)).gpu_s_redone == Approx(j->gpu_s_redone));
  // A cancel ends the job: nothing is sampled again, nothing more paid twice.
  const double before = j->gpu_s_redone;
  actors::coordinator::step(s, actors::coordinator::ev_cancel{"r1", std::nullopt}, 40, 40);
  CHECK(j->gpu_s_redone == Approx(before));
}

TEST_CASE("GPU-seconds paid twice: a lost attempt counts until its pool last reported running it") {
  sampling_line l;
  auto& s = l.s;
  auto& ps = l.ps;
  auto* j = l.j;
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  const double ordered = j->attempt_at;
  // The pool says it runs the attempt at +1 and +2, then its host is killed (silent from
  // +3): the lease runs out later, but no work was done after the last report.
  ps.busy_attempt = j->attempt;
  for (double t : {ordered + 1, ordered + 2}) {
    ps.seq += 1;
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{ps}, t, t);
  }
  actors::coordinator::step(s, actors::coordinator::ev_peer{"a", false}, ordered + 3, ordered + 3);
  for (double t = ordered + 4; t < ordered + 30 && j->state == actors::coordinator::job_state::sampling;
       t += 1)
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, t, t);
  REQUIRE(j->state == actors::coordinator::job_state::queued);
  REQUIRE(j->failures.back().end > ordered + 3);  // given up after the host went silent
  CHECK(j->gpu_s_redone == Approx(2 * 8));         // the 2 s it was seen running x 8 GPUs
  CHECK(s.gpu_s_redone == Approx(2 * 8));
}
