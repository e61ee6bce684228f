/// Unit tests of the peer liveness machine on virtual time.

#include <catch2/catch.hpp>

#include "nodes/bus/liveness.hpp"

using vidline::nodes::bus::liveness;
using vidline::nodes::bus::liveness_effect;
using kind = liveness_effect::kind;

namespace {

constexpr int64_t interval = 1000;
constexpr int misses = 3;

bool is(const std::vector<liveness_effect>& fx, std::initializer_list<kind> kinds) {
  if (fx.size() != kinds.size())
    return false;
  auto it = kinds.begin();
  for (const auto& e : fx)
    if (e.what != *it++)
      return false;
  return true;
}

/// Ticks every half interval from after `from` up to `to` (the bus never sleeps longer than
/// an interval), collecting the effects; `to` itself is ticked last.
std::vector<liveness_effect> advance(liveness& m, int64_t from, int64_t to) {
  std::vector<liveness_effect> out;
  for (int64_t t = from + interval / 2; t < to; t += interval / 2)
    for (auto& e : m.tick(t))
      out.push_back(e);
  for (auto& e : m.tick(to))
    out.push_back(e);
  return out;
}

} // namespace

TEST_CASE("a peer is up from its first beat and down after N missed beats", "[liveness]") {
  liveness m({"hostB", "hostC"}, interval, misses);
  CHECK(m.peer("hostB")->up == false);
  CHECK_FALSE(m.next_deadline());
  CHECK(m.tick(0).empty());  // never heard: nothing to announce

  auto fx = m.beat_received("hostB", 11, 100);
  REQUIRE(is(fx, {kind::peer_up}));
  CHECK(fx[0].host == "hostB");
  CHECK(fx[0].boot_id == 11);
  CHECK(m.peer("hostB")->up);
  CHECK(m.next_deadline() == 100 + interval * misses);

  // Beats every interval keep it up; repeated beats announce nothing.
  for (int64_t t = 1100; t <= 10100; t += interval) {
    CHECK(m.beat_received("hostB", 11, t).empty());
    CHECK(m.tick(t + interval - 1).empty());
  }
  // Then silence: still up just before the limit, down at it.
  const int64_t last = 10100;
  CHECK(advance(m, last + interval - 1, last + interval * misses - 1).empty());
  fx = m.tick(last + interval * misses);
  REQUIRE(is(fx, {kind::peer_down}));
  CHECK(fx[0].host == "hostB");
  CHECK(fx[0].boot_id == 11);
  CHECK_FALSE(m.peer("hostB")->up);
  CHECK(advance(m, last + interval * misses, last + 100 * interval).empty());  // once
  CHECK_FALSE(m.next_deadline());

  // Up again when beats resume from the same boot: no restart.
  fx = m.beat_received("hostB", 11, last + 100 * interval + 100);
  REQUIRE(is(fx, {kind::peer_up}));
  CHECK(m.peer("hostC")->up == false);
}

TEST_CASE("a changed boot_id is a restart, whether or not the peer was seen down",
          "[liveness]") {
  liveness m({"hostB"}, interval, misses);
  REQUIRE(is(m.beat_received("hostB", 11, 0), {kind::peer_up}));

  SECTION("a fast restart inside the silence limit") {
    auto fx = m.beat_received("hostB", 22, 1500);
    REQUIRE(is(fx, {kind::peer_restarted}));
    CHECK(fx[0].boot_id == 22);
    CHECK(m.peer("hostB")->up);
    CHECK(m.peer("hostB")->boot_id == 22);
  }
  SECTION("down first, then back with a new boot") {
    REQUIRE(is(advance(m, 0, interval * misses), {kind::peer_down}));
    auto fx = m.beat_received("hostB", 22, interval * misses + 400);
    REQUIRE(is(fx, {kind::peer_restarted, kind::peer_up}));
    CHECK(fx[1].boot_id == 22);
  }
  SECTION("a late beat of the previous boot is ignored") {
    REQUIRE(is(m.beat_received("hostB", 22, 1000), {kind::peer_restarted}));
    CHECK(m.beat_received("hostB", 11, 1100).empty());
    CHECK(m.peer("hostB")->boot_id == 22);
    CHECK(m.peer("hostB")->last_beat_ms == 1000);  // a stale beat does not keep it alive
    REQUIRE(is(advance(m, 1100, 1000 + interval * misses), {kind::peer_down}));
  }
}

TEST_CASE("beats from unknown hosts or without a boot are ignored", "[liveness]") {
  liveness m({"hostB"}, interval, misses);
  CHECK(m.beat_received("mallory", 5, 0).empty());
  CHECK(m.peer("mallory") == nullptr);
  CHECK(m.beat_received("hostB", 0, 0).empty());
  CHECK_FALSE(m.peer("hostB")->up);
}

TEST_CASE("the deadline follows the quietest up peer, clocks going back do no harm",
          "[liveness]") {
  liveness m({"b", "c"}, interval, misses);
  m.beat_received("b", 1, 0);
  m.beat_received("c", 2, 700);
  CHECK(m.next_deadline() == interval * misses);
  REQUIRE(is(advance(m, 700, interval * misses), {kind::peer_down}));
  CHECK(m.next_deadline() == 700 + interval * misses);
  CHECK(m.tick(-5000).empty());
  CHECK_THROWS_AS(liveness({"b"}, 0, 3), std::invalid_argument);
  CHECK_THROWS_AS(liveness({"b"}, 1000, 0), std::invalid_argument);
}

TEST_CASE("a local stall is not a peer's death: fresh grace for every up peer after a pause",
          "[liveness][stall]") {
  // The judge's host is paused (SIGSTOP) for 4.15 s: no tick, no beat read. The peers
  // dropped their connections meanwhile, so no beat is waiting when it wakes.
  liveness m({"beta", "gamma"}, interval, misses);
  REQUIRE(is(m.beat_received("beta", 0xb, 0), {kind::peer_up}));
  REQUIRE(is(m.beat_received("gamma", 0xc, 100), {kind::peer_up}));
  for (int64_t t = 500; t <= 5000; t += 500) {
    CHECK(m.beat_received("beta", 0xb, t).empty());
    CHECK(m.beat_received("gamma", 0xc, t + 100).empty());
    CHECK(m.tick(t + 200).empty());
  }
  const int64_t paused_at = 5200, woke_at = paused_at + 4150;
  auto fx = m.tick(woke_at);
  REQUIRE(is(fx, {kind::stalled}));  // and no peer_down
  CHECK(fx[0].gap_ms == 4150);
  CHECK(m.stalls() == 1);
  CHECK(m.peer("beta")->up);
  CHECK(m.peer("gamma")->up);
  // The grace is a whole silence limit from the wake-up: beats arriving within it (the
  // peers reconnect) keep both up; no down, no restart, the boot ids unchanged.
  CHECK(m.next_deadline() == woke_at + interval * misses);
  CHECK(advance(m, woke_at, woke_at + interval * misses - 1).empty());
  CHECK(m.beat_received("beta", 0xb, woke_at + interval * misses - 1).empty());
  CHECK(m.beat_received("gamma", 0xc, woke_at + interval * misses - 1).empty());
  CHECK(advance(m, woke_at + interval * misses - 1, woke_at + 2 * interval * misses - 2).empty());
  CHECK(m.peer("beta")->boot_id == 0xb);
}

TEST_CASE("after a stall a peer that stays silent is still declared down, a grace later",
          "[liveness][stall]") {
  liveness m({"beta", "gamma"}, interval, misses);
  m.beat_received("beta", 1, 0);
  m.beat_received("gamma", 2, 0);
  CHECK(advance(m, 0, 900).empty());
  // Stalled 6 s; gamma died meanwhile and never speaks again, beta does.
  const int64_t woke_at = 6900;
  SECTION("the first thing read after the stall is a beat") {
    auto fx = m.beat_received("beta", 1, woke_at);
    REQUIRE(is(fx, {kind::stalled}));
  }
  SECTION("the first thing is a tick") { REQUIRE(is(m.tick(woke_at), {kind::stalled})); }
  std::vector<liveness_effect> fx;
  for (int64_t t = woke_at + 500; t <= woke_at + interval * misses; t += 500) {
    for (auto& e : m.beat_received("beta", 1, t))
      fx.push_back(e);
    for (auto& e : m.tick(t))
      fx.push_back(e);
  }
  REQUIRE(is(fx, {kind::peer_down}));
  CHECK(fx[0].host == "gamma");
  CHECK(m.peer("beta")->up);
}

TEST_CASE("gaps up to the stall limit are ordinary: silence counts through them",
          "[liveness][stall]") {
  liveness m({"b"}, interval, misses);
  m.beat_received("b", 1, 0);
  CHECK(m.stall_gap_ms() == interval + interval / 2);
  // The loop's longest sleep is an interval; a slow pass adds a little: not a stall.
  CHECK(m.tick(interval).empty());
  CHECK(m.tick(interval + m.stall_gap_ms()).empty());
  REQUIRE(is(m.tick(interval * misses), {kind::peer_down}));
  CHECK(m.stalls() == 0);
  // A down peer stays down through a stall; only beats bring it back.
  REQUIRE(is(m.tick(interval * misses + 10000), {kind::stalled}));
  CHECK_FALSE(m.peer("b")->up);
}

TEST_CASE("a peer heard only by other frames is declared down once if no beat follows",
          "[liveness]") {
  liveness m({"b", "c"}, interval, misses);
  // Its pools' reports arrive, its first beat never does (it died first, or the beat was
  // lost while its link came up): judged from the first frame, once.
  CHECK(m.frame_received("b", 100).empty());
  CHECK(m.next_deadline() == 100 + interval * misses);
  CHECK(m.frame_received("b", 900).empty());  // later frames do not push the limit back
  CHECK(m.next_deadline() == 100 + interval * misses);
  CHECK(advance(m, 100, 100 + interval * misses - 1).empty());
  auto fx = m.tick(100 + interval * misses);
  REQUIRE(is(fx, {kind::peer_down}));
  CHECK(fx[0].host == "b");
  CHECK(fx[0].boot_id == 0);
  CHECK_FALSE(m.next_deadline());
  // Said once: more frames without beats change nothing.
  CHECK(advance(m, 100 + interval * misses, 5000).empty());
  CHECK(m.frame_received("b", 5000).empty());
  CHECK(advance(m, 5000, 20000).empty());
  CHECK_FALSE(m.next_deadline());
  // A beat brings it up; silence after that is judged as ever.
  REQUIRE(is(m.beat_received("b", 7, 20000), {kind::peer_up}));
  REQUIRE(is(advance(m, 20000, 20000 + interval * misses), {kind::peer_down}));
  // Unknown hosts and a peer whose beat comes in time are never judged this way.
  CHECK(m.frame_received("stranger", 23200).empty());
  CHECK(m.peer("stranger") == nullptr);
  CHECK(m.frame_received("c", 23300).empty());
  REQUIRE(is(m.beat_received("c", 3, 23500), {kind::peer_up}));
  CHECK(m.next_deadline() == 23500 + interval * misses);
}

TEST_CASE("a peer heard only by other frames gets a fresh grace after a local stall",
          "[liveness][stall]") {
  liveness m({"b"}, interval, misses);
  CHECK(m.frame_received("b", 0).empty());
  CHECK(m.tick(500).empty());
  REQUIRE(is(m.tick(500 + 10 * interval), {kind::stalled}));
  CHECK(m.next_deadline() == 500 + 10 * interval + interval * misses);
  REQUIRE(is(advance(m, 500 + 10 * interval, 500 + 10 * interval + interval * misses),
             {kind::peer_down}));
}
