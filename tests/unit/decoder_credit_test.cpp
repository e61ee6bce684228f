// The decoder's credit and queue machine on virtual time.
#include <catch2/catch.hpp>

#include "actors/decoder/decoder_machine.hpp"

using namespace vidline;
using namespace vidline::actors::decoder;

namespace {

msg::decode_order order(uint64_t attempt) {
  msg::decode_order o;
  o.decoder = "dec";
  o.attempt = attempt;
  o.job.run_id = "r";
  o.job.index = static_cast<uint32_t>(attempt);
  o.latent_sha256 = std::string(64, 'a');
  o.source_host = "a";
  return o;
}

template <class T>
int count(const std::vector<effect>& fx) {
  int n = 0;
  for (auto& e : fx)
    n += std::holds_alternative<T>(e) ? 1 : 0;
  return n;
}

/// The coordinator's answer to a status report sent at monotonic `sent`: `current` hold a
/// lease of `lease_ms` from then, `ended` were given up on.
msg::lease_grant answer(const msg::decoder_status& st, std::vector<uint64_t> current,
                        std::vector<uint64_t> ended = {}, uint64_t lease_ms = 3000) {
  msg::lease_grant g;
  g.target = st.decoder;
  g.epoch = st.epoch;
  g.seq = st.seq;
  g.current = std::move(current);
  g.ended = std::move(ended);
  g.lease_ms = lease_ms;
  return g;
}

/// Every held attempt gets a lease from a report sent at `mono`.
void lease_all(state& s, double mono) {
  auto st = s.status(mono);
  step(s, ev_grant{answer(st, st.holding), mono}, mono);
}

} // namespace

TEST_CASE("credits: two orders are taken, a third without a credit is refused") {
  state s;
  CHECK(s.credits() == 2);
  CHECK(count<fx_fetch>(step(s, ev_order{order(1)}, 0)) == 1);
  CHECK(count<fx_fetch>(step(s, ev_order{order(2)}, 0)) == 1);  // prefetch while 1 decodes
  CHECK(s.credits() == 0);
  CHECK(s.pending() == 1);
  auto fx = step(s, ev_order{order(3)}, 0);
  CHECK(count<fx_fetch>(fx) == 0);
  CHECK(s.refused_orders == 1);
  CHECK(s.holding.size() == 2);
}

TEST_CASE("one decode at a time, oldest fetched first, pending never above one") {
  state s;
  step(s, ev_order{order(1)}, 0);
  step(s, ev_order{order(2)}, 0);
  lease_all(s, 0);
  // 2 arrives first: it decodes; 1 waits.
  CHECK(count<fx_decode>(step(s, ev_fetched{2, "ok", ""}, 1)) == 1);
  CHECK(count<fx_decode>(step(s, ev_fetched{1, "ok", ""}, 2)) == 0);
  CHECK(s.pending() == 1);
  auto fx = step(s, ev_decoded{2, "ok", "", "/out/2", "x", 4, "/out/2", 0}, 5);
  CHECK(count<fx_decode>(fx) == 1);  // 1 starts right away
  CHECK(s.credits() == 1);
  CHECK(s.unacked.size() == 1);
  CHECK(s.status().credits == 1);
  step(s, ev_ack{2}, 6);
  CHECK(s.unacked.empty());
}

TEST_CASE("a resent order is not taken twice, before or after it finished") {
  state s;
  step(s, ev_order{order(1)}, 0);
  CHECK(step(s, ev_order{order(1)}, 0).empty());
  lease_all(s, 0);
  step(s, ev_fetched{1, "ok", ""}, 1);
  step(s, ev_decoded{1, "ok", "", "/o", "x", 1, "/o", 0}, 2);
  step(s, ev_ack{1}, 3);
  CHECK(step(s, ev_order{order(1)}, 4).empty());
  CHECK(s.holding.empty());
}

TEST_CASE("a latent that fails verification becomes a corrupt result and frees the credit") {
  state s;
  step(s, ev_order{order(1)}, 0);
  auto fx = step(s, ev_fetched{1, "corrupt", "digest mismatch"}, 1);
  CHECK(count<fx_decode>(fx) == 0);
  CHECK(count<fx_report>(fx) == 1);
  REQUIRE(s.unacked.size() == 1);
  CHECK(s.unacked[0].outcome == "corrupt");
  CHECK(s.credits() == 2);
}

// -- leases -------------------------------------------------------------------------------

namespace {

const fx_commit* commit_of(const std::vector<effect>& fx) {
  for (auto& e : fx)
    if (auto* c = std::get_if<fx_commit>(&e))
      return c;
  return nullptr;
}

ev_decoded decoded(uint64_t attempt, double mono) {
  return ev_decoded{attempt, "ok", "", "/out/job-1.mp4", "x", 4, "/out/.staged-1.mp4", mono};
}

} // namespace

TEST_CASE("leases: a video decoded within its lease is published at once") {
  state s;
  step(s, ev_order{order(1)}, 0);
  auto st = s.status(10.0);
  step(s, ev_grant{answer(st, {1}), 10.1}, 0);
  REQUIRE(s.holding.front().lease_until == Approx(10.0 + 3.0 * (1 - lease_margin)));
  step(s, ev_fetched{1, "ok", ""}, 0);
  auto fx = step(s, decoded(1, 12.3), 0);  // before 10 + 2.4
  auto* c = commit_of(fx);
  REQUIRE(c != nullptr);
  CHECK(c->staged == "/out/.staged-1.mp4");
  CHECK(c->output == "/out/job-1.mp4");
  REQUIRE(s.unacked.size() == 1);
  CHECK(s.unacked[0].outcome == "ok");
  CHECK(s.unacked[0].output == "/out/job-1.mp4");
}

TEST_CASE("leases: measured from when the report was sent, not when the grant came") {
  // The grant came late (the coordinator was slow, or the decoder paused after sending):
  // the lease is no longer from the grant's arrival.
  state s;
  step(s, ev_order{order(1)}, 0);
  auto st = s.status(10.0);
  step(s, ev_fetched{1, "ok", ""}, 0);
  step(s, ev_grant{answer(st, {1}), 14.0}, 0);
  auto fx = step(s, decoded(1, 14.1), 0);
  CHECK(commit_of(fx) == nullptr);
  CHECK(s.holding.front().at == phase::confirming);
  // A grant for a report this decoder never sent (or forgot) renews nothing.
  auto bogus = answer(st, {1});
  bogus.seq = 999;
  CHECK(commit_of(step(s, ev_grant{bogus, 14.2}, 0)) == nullptr);
  bogus = answer(st, {1});
  bogus.epoch = st.epoch + 1;  // another epoch's: not ours
  CHECK(commit_of(step(s, ev_grant{bogus, 14.2}, 0)) == nullptr);
  CHECK(s.unacked.empty());
}

TEST_CASE("leases: a decoder paused past its lease does not publish without the coordinator") {
  // gamma decodes job 1; its host is stopped for 5.8 s; meanwhile the coordinator gave the
  // job to another decoder. On waking the decode ends: the video is staged, not published.
  state s;
  step(s, ev_order{order(1)}, 0);
  lease_all(s, 100.0);
  step(s, ev_fetched{1, "ok", ""}, 0);
  auto fx = step(s, decoded(1, 100.0 + 5.8), 0);
  CHECK(commit_of(fx) == nullptr);
  CHECK(count<fx_report>(fx) == 1);  // the question: a status report
  CHECK(s.unacked.empty());
  CHECK(s.credits() == 1);  // still held while it waits

  SECTION("the coordinator ended the attempt: the video is removed, counted, not published") {
    auto st = s.status(105.9);
    CHECK(st.holding == std::vector<uint64_t>{1});
    fx = step(s, ev_grant{answer(st, {}, {1}), 105.95}, 0);
    CHECK(commit_of(fx) == nullptr);
    REQUIRE(count<fx_discard>(fx) == 1);
    for (auto& e : fx)
      if (auto* d = std::get_if<fx_discard>(&e)) {
        CHECK(d->path == "/out/.staged-1.mp4");
        CHECK_FALSE(d->published);
      }
    CHECK(s.fenced == 1);
    CHECK(s.status(106).fenced == 1);
    REQUIRE(s.unacked.size() == 1);
    CHECK(s.unacked[0].outcome == msg::outcome::fenced);
    CHECK(s.unacked[0].output.empty());
    CHECK(s.holding.empty());
  }
  SECTION("the coordinator still holds it current: published then") {
    auto st = s.status(105.9);
    fx = step(s, ev_grant{answer(st, {1}), 105.95}, 0);
    REQUIRE(commit_of(fx) != nullptr);
    REQUIRE(s.unacked.size() == 1);
    CHECK(s.unacked[0].outcome == "ok");
    CHECK(s.fenced == 0);
  }
  SECTION("no answer: nothing is published however long it waits") {
    for (double t = 106; t < 200; t += 0.5)
      CHECK(commit_of(step(s, ev_fetched{1, "ok", ""}, t)) == nullptr);
    CHECK(s.unacked.empty());
  }
}

TEST_CASE("leases: an ended attempt is dropped wherever it is, a published loser removed") {
  state s;
  step(s, ev_order{order(1)}, 0);
  step(s, ev_order{order(2)}, 0);
  auto st = s.status(0);
  step(s, ev_fetched{1, "ok", ""}, 0);  // 1 decodes, 2 still fetching
  auto fx = step(s, ev_grant{answer(st, {1}, {2}), 0.1}, 0);
  CHECK(s.holding.size() == 2);  // the fetch runs on; dropped when it ends
  fx = step(s, ev_fetched{2, "ok", ""}, 0.2);
  CHECK(count<fx_decode>(fx) == 0);
  CHECK(s.holding.size() == 1);
  CHECK(s.dropped == 1);
  // An ended attempt still decoding: its video is removed when the decode ends.
  st = s.status(0.3);
  step(s, ev_grant{answer(st, {}, {1}), 0.4}, 0);
  fx = step(s, decoded(1, 0.5), 0);
  CHECK(count<fx_discard>(fx) == 1);
  CHECK(commit_of(fx) == nullptr);
  CHECK(s.fenced == 1);
  // A video published within its lease whose result reached the coordinator only after
  // another attempt's was published: the ack says discard.
  state t;
  step(t, ev_order{order(3)}, 0);
  lease_all(t, 0);
  step(t, ev_fetched{3, "ok", ""}, 0);
  REQUIRE(commit_of(step(t, decoded(3, 1), 0)) != nullptr);
  fx = step(t, ev_ack{3, true}, 2);
  REQUIRE(count<fx_discard>(fx) == 1);
  for (auto& e : fx)
    if (auto* d = std::get_if<fx_discard>(&e)) {
      CHECK(d->published);
      CHECK(d->path == "/out/job-1.mp4");
    }
  CHECK(t.fenced == 1);
  CHECK(t.unacked.empty());
  CHECK(count<fx_discard>(step(t, ev_ack{3, true}, 3)) == 0);  // once
}

TEST_CASE("status shows the pending queue") {
  state s;
  step(s, ev_order{order(1)}, 0);
  step(s, ev_order{order(2)}, 0);
  CHECK(s.status().pending == 1);
}
