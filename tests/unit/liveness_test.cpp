/// Unit tests of the peer liveness machine on virtual time.

#include <catch2/catch.hpp>

#include "nodes/liveness.hpp"

using vidline::nodes::liveness;
using vidline::nodes::liveness_effect;
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
  CHECK(m.tick(last + interval * misses - 1).empty());
  fx = m.tick(last + interval * misses);
  REQUIRE(is(fx, {kind::peer_down}));
  CHECK(fx[0].host == "hostB");
  CHECK(fx[0].boot_id == 11);
  CHECK_FALSE(m.peer("hostB")->up);
  CHECK(m.tick(last + 100 * interval).empty());  // down is announced once
  CHECK_FALSE(m.next_deadline());

  // Up again when beats resume from the same boot: no restart.
  fx = m.beat_received("hostB", 11, 50000);
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
    REQUIRE(is(m.tick(interval * misses), {kind::peer_down}));
    auto fx = m.beat_received("hostB", 22, 9000);
    REQUIRE(is(fx, {kind::peer_restarted, kind::peer_up}));
    CHECK(fx[1].boot_id == 22);
  }
  SECTION("a late beat of the previous boot is ignored") {
    REQUIRE(is(m.beat_received("hostB", 22, 1000), {kind::peer_restarted}));
    CHECK(m.beat_received("hostB", 11, 1100).empty());
    CHECK(m.peer("hostB")->boot_id == 22);
    CHECK(m.peer("hostB")->last_beat_ms == 1000);  // a stale beat does not keep it alive
    REQUIRE(is(m.tick(1000 + interval * misses), {kind::peer_down}));
  }
}

TEST_CASE("beats from unknown hosts or without a boot are ignored", "[liveness]") {
  liveness m({"hostB"}, interval, misses);
  CHECK(m.beat_received("mallory", 5, 0).empty());
  CHECK(m.peer("mallory") == nullptr);
  CHECK(m.beat_received("hostB", 0, 0).empty());
  CHECK_FALSE(m.peer("hostB")->up);
}

TEST_CASE("the deadline follows the quietest up peer; clocks going back do no harm",
          "[liveness]") {
  liveness m({"b", "c"}, interval, misses);
  m.beat_received("b", 1, 0);
  m.beat_received("c", 2, 700);
  CHECK(m.next_deadline() == interval * misses);
  REQUIRE(is(m.tick(interval * misses), {kind::peer_down}));
  CHECK(m.next_deadline() == 700 + interval * misses);
  CHECK(m.tick(-5000).empty());
  CHECK_THROWS_AS(liveness({"b"}, 0, 3), std::invalid_argument);
  CHECK_THROWS_AS(liveness({"b"}, 1000, 0), std::invalid_argument);
}
