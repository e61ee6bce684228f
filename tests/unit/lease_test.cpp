// Leases that fence a stage given up on (docs/reliability.md, "Leases"): the pool's machine
// and the coordinator's scheduler on virtual time. The decoder's are in
// decoder_credit_test.cpp.
#include <catch2/catch.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "actors/pool/pool_machine.hpp"
#include "tests/support/effects.hpp"

using namespace vidline;
using testing_support::first_of;
using testing_support::count_of;

namespace {

// -- the pool ------------------------------------------------------------------------------

msg::sample_order sample_order(uint64_t attempt) {
  msg::sample_order o;
  o.pool = "p";
  o.attempt = attempt;
  o.job.run_id = "r";
  o.job.index = 4;
  return o;
}

msg::lease_grant answer(const msg::pool_status& st, std::vector<uint64_t> current,
                        std::vector<uint64_t> ended = {}) {
  msg::lease_grant g;
  g.target = st.pool;
  g.epoch = st.epoch;
  g.seq = st.seq;
  g.current = std::move(current);
  g.ended = std::move(ended);
  g.lease_ms = 3000;
  return g;
}

/// A pool whose attempt 7 is sampling, its last grant from a report sent at `mono`.
actors::pool::state sampling_pool(double mono) {
  actors::pool::state s;
  s.pool = "p";
  s.epoch = 5;
  actors::pool::step(s, actors::pool::ev_order{sample_order(7)}, 0);
  auto st = s.status(mono);
  actors::pool::step(s, actors::pool::ev_grant{answer(st, {7}), mono}, 0);
  actors::pool::step(s, actors::pool::ev_conditioned{7, true, "/c", 0, ""}, 0);
  REQUIRE(s.at == actors::pool::phase::sampling);
  return s;
}

actors::pool::ev_sampled sampled(double mono) {
  actors::pool::ev_sampled e;
  e.attempt = 7;
  e.outcome = msg::outcome::ok;
  e.sha256 = std::string(64, 'b');
  e.bytes = 10;
  e.staged = "/work/7/latent";
  e.mono_s = mono;
  return e;
}

} // namespace

TEST_CASE("pool lease: a latent sampled within the lease is committed at once") {
  auto s = sampling_pool(50);
  auto fx = actors::pool::step(s, sampled(51), 0);
  auto* c = first_of<actors::pool::fx_commit>(fx);
  REQUIRE(c != nullptr);
  CHECK(c->staged == "/work/7/latent");
  CHECK(c->sha256 == std::string(64, 'b'));
  REQUIRE(s.unacked.size() == 1);
  CHECK(s.unacked[0].outcome == "ok");
  CHECK(s.at == actors::pool::phase::idle);
}

TEST_CASE("pool budget: the latent budget is an event and a change is reported at once") {
  actors::pool::state s;
  s.pool = "p";
  CHECK(s.status().accepting);
  auto fx = actors::pool::step(s, actors::pool::ev_budget{false}, 0);
  CHECK(count_of<actors::pool::fx_report>(fx) == 1);
  CHECK_FALSE(s.status().accepting);
  // Told every interval: no change, no extra report.
  CHECK(actors::pool::step(s, actors::pool::ev_budget{false}, 1).empty());
  // A running attempt goes on at the budget (the overshoot is at most one latent).
  s = sampling_pool(50);
  actors::pool::step(s, actors::pool::ev_budget{false}, 51);
  CHECK(s.at == actors::pool::phase::sampling);
  fx = actors::pool::step(s, sampled(52), 0);
  CHECK(first_of<actors::pool::fx_commit>(fx) != nullptr);
  fx = actors::pool::step(s, actors::pool::ev_budget{true}, 53);
  CHECK(count_of<actors::pool::fx_report>(fx) == 1);
  CHECK(s.status().accepting);
}

TEST_CASE("pool lease: past the lease nothing is committed until the coordinator answers") {
  auto s = sampling_pool(50);
  auto fx = actors::pool::step(s, sampled(50 + 4.2), 0);  // the host was paused
  CHECK(first_of<actors::pool::fx_commit>(fx) == nullptr);
  CHECK(count_of<actors::pool::fx_report>(fx) == 1);
  CHECK(s.at == actors::pool::phase::confirming);
  CHECK(s.unacked.empty());
  auto st = s.status(54.3);
  CHECK(st.busy_attempt == 7);  // the pool is not free while it waits

  SECTION("ended: the latent is removed and the result says fenced") {
    fx = actors::pool::step(s, actors::pool::ev_grant{answer(st, {}, {7}), 54.4}, 0);
    auto* d = first_of<actors::pool::fx_discard>(fx);
    REQUIRE(d != nullptr);
    CHECK(d->staged == "/work/7/latent");
    CHECK(first_of<actors::pool::fx_commit>(fx) == nullptr);
    CHECK(s.fenced == 1);
    CHECK(s.status(55).fenced == 1);
    REQUIRE(s.unacked.size() == 1);
    CHECK(s.unacked[0].outcome == msg::outcome::fenced);
    CHECK(s.unacked[0].latent_sha256.empty());
    CHECK(s.at == actors::pool::phase::idle);
  }
  SECTION("current: committed now") {
    fx = actors::pool::step(s, actors::pool::ev_grant{answer(st, {7}), 54.4}, 0);
    REQUIRE(first_of<actors::pool::fx_commit>(fx) != nullptr);
    REQUIRE(s.unacked.size() == 1);
    CHECK(s.unacked[0].outcome == "ok");
  }
  SECTION("a grant answering an older report renews too little: still waiting") {
    actors::pool::state fresh = sampling_pool(10);
    actors::pool::step(fresh, sampled(50), 0);
    auto old = fresh.status(11);  // sent at 11, answered only at 50
    fx = actors::pool::step(fresh, actors::pool::ev_grant{answer(old, {7}), 50}, 0);
    CHECK(first_of<actors::pool::fx_commit>(fx) == nullptr);
    CHECK(fresh.at == actors::pool::phase::confirming);
  }
}

TEST_CASE("pool lease: an attempt ended while it runs makes nothing public") {
  auto s = sampling_pool(50);
  auto st = s.status(51);
  actors::pool::step(s, actors::pool::ev_grant{answer(st, {}, {7}), 51}, 0);
  auto fx = actors::pool::step(s, sampled(52), 0);  // within the old lease, but ended
  CHECK(first_of<actors::pool::fx_commit>(fx) == nullptr);
  CHECK(first_of<actors::pool::fx_discard>(fx) != nullptr);
  REQUIRE(s.unacked.size() == 1);
  CHECK(s.unacked[0].outcome == msg::outcome::fenced);
}

// -- the coordinator -----------------------------------------------------------------------

namespace {

/// One pool on host a, decoders on hosts b and c.
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

actors::coordinator::run one_job() {
  actors::coordinator::run r;
  r.id = "r1";
  r.mode = "m";
  actors::coordinator::job j;
  j.spec = msg::job_spec{"r1", 0, 100, 416, 736, 5, "p", "sha-p", ""};
  r.jobs.push_back(j);
  return r;
}

msg::pool_status pool_status(uint64_t seq, uint64_t busy) {
  msg::pool_status st;
  st.pool = "p";
  st.host = "a";
  st.epoch = 1;
  st.seq = seq;
  st.busy_attempt = busy;
  return st;
}

msg::decoder_status decoder_status(const std::string& name, const std::string& host,
                                   uint64_t seq, std::vector<uint64_t> holding) {
  msg::decoder_status st;
  st.decoder = name;
  st.host = host;
  st.epoch = name == "db" ? 11 : 12;
  st.seq = seq;
  st.capacity = 2;
  st.holding = std::move(holding);
  st.credits = 2 - static_cast<uint32_t>(st.holding.size());
  return st;
}

msg::decode_result decode_ok(const std::string& decoder, const std::string& host,
                             uint64_t attempt) {
  msg::decode_result r;
  r.decoder = decoder;
  r.host = host;
  r.attempt = attempt;
  r.run_id = "r1";
  r.index = 0;
  r.outcome = msg::outcome::ok;
  r.output = "/out/" + host + "/job-0.mp4";
  r.output_sha256 = std::string(64, 'c');
  r.stage = "decode";
  return r;
}

/// Steps the line to job 0 decoding on db (host b) at monotonic 10; returns its attempt.
uint64_t decoding_on_b(actors::coordinator::state& s) {
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("db", "b", 1, {})}, 0, 0);
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("dc", "c", 1, {})}, 0, 0);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_status(1, 0)}, 0, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{one_job()}, 0, 0);
  auto* j = s.find_job("r1", 0);
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  msg::sample_result r;
  r.pool = "p";
  r.host = "a";
  r.attempt = j->attempt;
  r.run_id = "r1";
  r.index = 0;
  r.outcome = msg::outcome::ok;
  r.latent_sha256 = std::string(64, 'a');
  r.latent_bytes = 10;
  actors::coordinator::step(s, actors::coordinator::ev_sample_result{r}, 10, 10);
  REQUIRE(j->state == actors::coordinator::job_state::decoding);
  REQUIRE(j->decoder == "db");
  return j->attempt;
}

const actors::coordinator::fx_grant* grant_in(const std::vector<actors::coordinator::effect>& fx) {
  return first_of<actors::coordinator::fx_grant>(fx);
}

} // namespace

TEST_CASE("coordinator lease: every status report is answered, current attempts renewed") {
  auto s = line();
  const uint64_t a = decoding_on_b(s);
  auto* j = s.find_job("r1", 0);
  CHECK(j->lease_until == Approx(13));  // from the order
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("db", "b", 2, {a, 999})}, 11,
                        11.5);
  auto* g = grant_in(fx);
  REQUIRE(g != nullptr);
  CHECK(g->host == "b");
  CHECK(g->target == "decoder:db");
  CHECK(g->grant.target == "db");
  CHECK(g->grant.epoch == 11);
  CHECK(g->grant.seq == 2);
  CHECK(g->grant.current == std::vector<uint64_t>{a});
  CHECK(g->grant.ended == std::vector<uint64_t>{999});  // unknown: given up on
  CHECK(g->grant.lease_ms == 3000);
  CHECK(j->lease_until == Approx(14.5));
  // A report holding nothing needs no answer.
  CHECK(grant_in(actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("dc", "c", 2, {})}, 11,
                             11.6))
        == nullptr);
}

TEST_CASE("coordinator lease: a stage is not moved before its lease expired") {
  // The decoder's host goes silent (paused, or cut off): declared down, but its job stays
  // until the lease it may still hold has run out on the coordinator's clock.
  auto s = line();
  const uint64_t a = decoding_on_b(s);
  auto* j = s.find_job("r1", 0);
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("db", "b", 2, {a})}, 11, 11);  // to 14
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 12, 12);
  CHECK(j->state == actors::coordinator::job_state::decoding);
  CHECK(j->decoder == "db");
  CHECK(j->attempt == a);
  CHECK(count_of<actors::coordinator::fx_send_decode>(fx) == 0);
  CHECK(count_of<actors::coordinator::fx_send_decode>(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 13, 13.9)) == 0);
  CHECK(j->attempt == a);

  SECTION("the host comes back within the lease: renewed, nothing moved, decoded once") {
    actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 13.95, 13.95);
    fx = actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("db", "b", 3, {a})}, 14, 14);
    REQUIRE(grant_in(fx) != nullptr);
    CHECK(grant_in(fx)->grant.current == std::vector<uint64_t>{a});
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, 20, 16.9);
    CHECK(j->attempt == a);
    CHECK(j->decoder == "db");
  }
  SECTION("expired: moved to the other decoder; the old attempt is told it ended") {
    fx = actors::coordinator::step(s, actors::coordinator::ev_tick{}, 14, 14.0);
    CHECK(j->state == actors::coordinator::job_state::decoding);
    CHECK(j->decoder == "dc");
    CHECK(j->attempt != a);
    auto* order = first_of<actors::coordinator::fx_send_decode>(fx);
    REQUIRE(order != nullptr);
    CHECK(order->host == "c");
    CHECK(j->decode_attempts == 1);  // a lost attempt, refunded
    // b resumes and asks about its attempt: ended.
    actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 15, 15);
    fx = actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("db", "b", 3, {a})}, 15, 15);
    REQUIRE(grant_in(fx) != nullptr);
    CHECK(grant_in(fx)->grant.ended == std::vector<uint64_t>{a});
    CHECK(grant_in(fx)->grant.current.empty());
  }
}

TEST_CASE("coordinator lease: a pool's host down keeps its job until the lease expired") {
  auto s = line();
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("db", "b", 1, {})}, 0, 0);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_status(1, 0)}, 0, 0);
  actors::coordinator::step(s, actors::coordinator::ev_submit{one_job()}, 0, 0);
  auto* j = s.find_job("r1", 0);
  const uint64_t a = j->attempt;
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_status(2, a)}, 1, 1);  // lease to 4
  REQUIRE(grant_in(fx) != nullptr);
  CHECK(grant_in(fx)->grant.current == std::vector<uint64_t>{a});
  actors::coordinator::step(s, actors::coordinator::ev_peer{"a", false}, 2, 2);
  CHECK(j->state == actors::coordinator::job_state::sampling);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 3, 3.9);
  CHECK(j->state == actors::coordinator::job_state::sampling);
  CHECK(j->attempt == a);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 4, 4.1);
  CHECK(j->state == actors::coordinator::job_state::queued);  // only pool is down: it waits
  CHECK(j->sample_attempts == 0);               // refunded
}

TEST_CASE("coordinator lease: a restarted worker lost its attempt at once, lease or not") {
  auto s = line();
  const uint64_t a = decoding_on_b(s);
  auto* j = s.find_job("r1", 0);
  auto st = decoder_status("db", "b", 1, {});
  st.epoch = 99;  // a new epoch: the old actor, and whatever it was doing, is gone
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{st}, 11, 11);
  CHECK(j->attempt != a);
}

TEST_CASE("coordinator lease: a late video is the job's while it waits, else counted twice") {
  auto s = line();
  const uint64_t a = decoding_on_b(s);
  auto* j = s.find_job("r1", 0);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 12, 12);
  actors::coordinator::step(s, actors::coordinator::ev_tick{}, 14, 14);  // expired: moved to dc
  const uint64_t b = j->attempt;
  REQUIRE(j->decoder == "dc");

  SECTION("b's video (committed within its lease, its result delayed) comes first: adopted") {
    actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 15, 15);
    auto fx = actors::coordinator::step(s, actors::coordinator::ev_decode_result{decode_ok("db", "b", a)}, 15, 15);
    CHECK(j->state == actors::coordinator::job_state::succeeded);
    CHECK(j->output == "/out/b/job-0.mp4");
    CHECK(j->decoder == "db");
    CHECK(j->duplicates == 0);
    // dc's attempt is given up on: ended in its next grant, and its video then fenced.
    fx = actors::coordinator::step(s, actors::coordinator::ev_decoder_status{decoder_status("dc", "c", 2, {b})}, 16, 16);
    REQUIRE(grant_in(fx) != nullptr);
    CHECK(grant_in(fx)->grant.ended == std::vector<uint64_t>{b});
    auto fenced = decode_ok("dc", "c", b);
    fenced.outcome = msg::outcome::fenced;
    fenced.output.clear();
    actors::coordinator::step(s, actors::coordinator::ev_decode_result{fenced}, 17, 17);
    actors::coordinator::step(s, actors::coordinator::ev_decode_result{fenced}, 17, 17);  // resent: counted once
    CHECK(j->fenced == 1);
    CHECK(actors::coordinator::summarize(s.runs.front()).fenced == 1);
    CHECK(actors::coordinator::summarize(s.runs.front()).done_twice == 0);
    CHECK(j->state == actors::coordinator::job_state::succeeded);
  }
  SECTION("dc's video is published first: b's is a stage done twice, removed and counted") {
    actors::coordinator::step(s, actors::coordinator::ev_decode_result{decode_ok("dc", "c", b)}, 15, 15);
    REQUIRE(j->state == actors::coordinator::job_state::succeeded);
    auto fx = actors::coordinator::step(s, actors::coordinator::ev_decode_result{decode_ok("db", "b", a)}, 16, 16);
    auto* ack = first_of<actors::coordinator::fx_ack>(fx);
    REQUIRE(ack != nullptr);
    CHECK(ack->attempt == a);
    CHECK(ack->discard);
    CHECK(j->output == "/out/c/job-0.mp4");
    CHECK(j->duplicates == 1);
    actors::coordinator::step(s, actors::coordinator::ev_decode_result{decode_ok("db", "b", a)}, 17, 17);
    CHECK(j->duplicates == 1);
    CHECK(actors::coordinator::summarize(s.runs.front()).done_twice == 1);
  }
}

TEST_CASE("coordinator lease: a late video adopted after its job was queued again keeps its latent") {
  // Found by the 72-hour soak: the latent's host and the decoder's went down, the job was
  // queued again (its latent forgotten), then the video came: it succeeded with no latent.
  auto s = line();
  const uint64_t a = decoding_on_b(s);
  auto* j = s.find_job("r1", 0);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 12, 12);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"a", false}, 12, 12);
  for (double t = 13; t < 40 && j->state != actors::coordinator::job_state::queued; t += 1)
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, t, t);
  REQUIRE(j->state == actors::coordinator::job_state::queued);
  REQUIRE(j->latent_sha256.empty());
  auto late = decode_ok("db", "b", a);
  late.latent_sha256 = std::string(64, 'a');
  late.latent_bytes = 10;
  late.latent_host = "a";
  // Its pool's host back: sampled again under a new attempt, and then the video comes.
  actors::coordinator::step(s, actors::coordinator::ev_peer{"a", true}, 41, 41);
  actors::coordinator::step(s, actors::coordinator::ev_pool_status{pool_status(50, 0)}, 41, 41);
  REQUIRE(j->state == actors::coordinator::job_state::sampling);
  REQUIRE(j->attempt != a);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 42, 42);
  actors::coordinator::step(s, actors::coordinator::ev_decode_result{late}, 42, 42);
  CHECK(j->state == actors::coordinator::job_state::succeeded);
  CHECK(j->latent_sha256 == std::string(64, 'a'));
  CHECK(j->latent_bytes == 10);
  CHECK(j->latent_host == "a");
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("coordinator lease: the job's own attempt's video, late while the job waits again, is adopted") {
  // Its decoder's host went down, the lease ran out, the job waits for a decoder again
  // (same attempt number until it is ordered again); then the decoder's result comes.
  auto s = line();
  const uint64_t a = decoding_on_b(s);
  auto* j = s.find_job("r1", 0);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", false}, 12, 12);
  actors::coordinator::step(s, actors::coordinator::ev_peer{"c", false}, 12, 12);  // no other decoder to move to
  for (double t = 13; t < 40 && j->state == actors::coordinator::job_state::decoding; t += 1)
    actors::coordinator::step(s, actors::coordinator::ev_tick{}, t, t);
  REQUIRE(j->state != actors::coordinator::job_state::decoding);
  REQUIRE(j->attempt == a);
  auto late = decode_ok("db", "b", a);
  late.latent_sha256 = std::string(64, 'a');
  late.latent_bytes = 10;
  late.latent_host = "a";
  actors::coordinator::step(s, actors::coordinator::ev_peer{"b", true}, 41, 41);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_decode_result{late}, 41, 41);
  CHECK(j->state == actors::coordinator::job_state::succeeded);
  CHECK(j->output == "/out/b/job-0.mp4");
  auto* ack = first_of<actors::coordinator::fx_ack>(fx);
  REQUIRE(ack != nullptr);
  CHECK_FALSE(ack->discard);
  CHECK(actors::coordinator::check_index(s).empty());
}
