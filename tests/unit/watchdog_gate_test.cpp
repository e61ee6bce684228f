/// Unit tests of the systemd watchdog's gate (nodes/systemd_notify.hpp): it pets only
/// while every loop turns.

#include <catch2/catch.hpp>

#include "nodes/systemd_notify.hpp"

using vidline::nodes::watchdog_gate;

TEST_CASE("the watchdog is petted while every loop turns, never while one is stuck") {
  watchdog_gate g;
  CHECK(g.alive({3, 40}));           // both moved from zero
  CHECK(g.alive({4, 41}));
  CHECK_FALSE(g.alive({4, 42}));     // the bus loop is stuck
  REQUIRE(g.stalled() == std::vector<std::size_t>{0});
  CHECK_FALSE(g.alive({4, 43}));     // still stuck: still no pet
  CHECK(g.alive({5, 44}));           // it turned again
  CHECK(g.stalled().empty());
  CHECK_FALSE(g.alive({6, 44}));     // now the main loop
  CHECK(g.stalled() == std::vector<std::size_t>{1});
  CHECK_FALSE(g.alive({6, 44}));     // both
  CHECK(g.stalled() == std::vector<std::size_t>{0, 1});
}

TEST_CASE("a loop that never turned keeps the watchdog from being petted") {
  watchdog_gate g;
  CHECK_FALSE(g.alive({0, 7}));
  CHECK(g.stalled() == std::vector<std::size_t>{0});
}
