// The GPU health rule and the energy meter (actors/gpu/health.hpp): pure, time given.
#include <catch2/catch.hpp>

#include "actors/gpu/health.hpp"
#include "actors/gpu/power_log.hpp"

using namespace vidline;

namespace {

msg::gpu_sample reading(double temp, double slowdown = 90) {
  msg::gpu_sample g;
  g.source = "nvml";
  g.temperature_c = temp;
  g.slowdown_c = slowdown;
  g.ecc_uncorrected = 0;
  return g;
}

/// A cool reading with Xid figures: `xids` (code, count) since the node started.
msg::gpu_sample with_xids(std::vector<std::pair<int32_t, int64_t>> xids) {
  auto g = reading(60);
  g.xid_events = 0;
  for (auto& [code, count] : xids) {
    g.xids.push_back({code, count, 1000});
    g.xid_events += count;
    g.xid_last = code;
  }
  return g;
}

} // namespace

TEST_CASE("health: a critical Xid is sick at once, naming it, and recovers after recover_s") {
  actors::gpu::health_params p{30, 60};
  actors::gpu::health_state h;
  auto g = with_xids({});
  CHECK_FALSE(actors::gpu::step(h, g, p, 0));
  CHECK(g.health == "ok");
  g = with_xids({{79, 1}});
  CHECK(actors::gpu::step(h, g, p, 10));
  CHECK(g.health == "sick");
  CHECK_THAT(g.health_reason, Catch::Contains("Xid 79") && Catch::Contains("fallen off the bus"));
  // The same count again is no new Xid: the recovery clock runs from the next reading.
  g = with_xids({{79, 1}});
  CHECK_FALSE(actors::gpu::step(h, g, p, 11));
  CHECK(g.health == "sick");
  CHECK_THAT(g.health_reason, Catch::Contains("Xid 79"));  // the reason stays while sick
  g = with_xids({{79, 1}});
  CHECK_FALSE(actors::gpu::step(h, g, p, 70));
  // Another critical Xid (a 48) before recover_s passed: the clock starts again.
  g = with_xids({{48, 1}, {79, 1}});
  CHECK_FALSE(actors::gpu::step(h, g, p, 71));
  CHECK_THAT(g.health_reason, Catch::Contains("Xid 48") && Catch::Contains("double-bit ECC"));
  CHECK_THAT(g.health_reason, !Catch::Contains("Xid 79"));  // 79 is old news
  g = with_xids({{48, 1}, {79, 1}});
  CHECK_FALSE(actors::gpu::step(h, g, p, 72));
  g = with_xids({{48, 1}, {79, 1}});
  CHECK_FALSE(actors::gpu::step(h, g, p, 131));
  g = with_xids({{48, 1}, {79, 1}});
  CHECK(actors::gpu::step(h, g, p, 132));  // 60 s since 72 without a new one
  CHECK(g.health == "ok");
  CHECK(g.health_reason.empty());
}

TEST_CASE("health: other Xids are counted, never sick") {
  actors::gpu::health_params p{30, 0};
  actors::gpu::health_state h;
  int64_t n = 0;
  for (int32_t code : {13, 31, 43, 45, 63, 999}) {
    auto g = with_xids({{code, ++n}});
    CHECK_FALSE(actors::gpu::step(h, g, p, static_cast<double>(n)));
    CHECK(g.health == "ok");
    CHECK(std::string(actors::gpu::xid_meaning(code)).empty());
  }
  for (int32_t code : {48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120})
    CHECK_FALSE(std::string(actors::gpu::xid_meaning(code)).empty());
}

TEST_CASE("health: Xids by their counts: a lost report costs nothing, unknown forgets nothing") {
  actors::gpu::health_params p{30, 0};
  actors::gpu::health_state h;
  auto g = with_xids({{13, 1}});
  CHECK_FALSE(actors::gpu::step(h, g, p, 0));
  // The reading that brought the 79 was lost; the next shows it with a later 13.
  g = with_xids({{13, 2}, {79, 1}});
  g.xid_last = 13;
  CHECK(actors::gpu::step(h, g, p, 2));
  CHECK_THAT(g.health_reason, Catch::Contains("Xid 79"));
  g = with_xids({{13, 2}, {79, 1}});
  CHECK(actors::gpu::step(h, g, p, 3));  // recover_s 0: well at the first reading without a new one
  // A reading without Xid figures (the card missing from its driver: lost), then back
  // with the same counts: no new Xid.
  msg::gpu_sample gone;
  gone.source = "nvml";
  gone.lost = true;
  CHECK(actors::gpu::step(h, gone, p, 4));
  CHECK_THAT(gone.health_reason, Catch::Contains("lost") && !Catch::Contains("Xid"));
  g = with_xids({{13, 2}, {79, 1}});
  CHECK(actors::gpu::step(h, g, p, 5));
  CHECK(g.health == "ok");
  // Lost with a new 79: both named.
  g = with_xids({{13, 2}, {79, 2}});
  g.lost = true;
  CHECK(actors::gpu::step(h, g, p, 6));
  CHECK_THAT(g.health_reason, Catch::Contains("lost") && Catch::Contains("Xid 79"));
}

TEST_CASE("health: hot above slowdown for longer than hot_s is sick, recovers after recover_s") {
  actors::gpu::health_params p{30, 60};
  actors::gpu::health_state h;
  auto g = reading(95);
  CHECK_FALSE(actors::gpu::step(h, g, p, 0));
  CHECK(g.health == "ok");
  g = reading(95);
  CHECK_FALSE(actors::gpu::step(h, g, p, 29));
  g = reading(95);
  CHECK(actors::gpu::step(h, g, p, 30));  // hot for 30 s: sick
  CHECK(g.health == "sick");
  CHECK_THAT(g.health_reason, Catch::Contains("slowdown") && Catch::Contains("95"));
  // Cool: still sick until recover_s passed without a condition.
  g = reading(70);
  CHECK_FALSE(actors::gpu::step(h, g, p, 40));
  CHECK(g.health == "sick");
  g = reading(70);
  CHECK_FALSE(actors::gpu::step(h, g, p, 99));
  // Hot again (briefly) restarts the recovery clock only once it is hot for hot_s.
  g = reading(91);
  CHECK_FALSE(actors::gpu::step(h, g, p, 99.5));
  g = reading(70);
  CHECK(actors::gpu::step(h, g, p, 100));  // 60 s since 40 with no condition holding
  CHECK(g.health == "ok");
  CHECK(g.health_reason.empty());
}

TEST_CASE("health: a short spike above slowdown is no fault") {
  actors::gpu::health_params p{30, 60};
  actors::gpu::health_state h;
  for (double t : {0.0, 10.0, 20.0}) {
    auto g = reading(t == 10.0 ? 70 : 95);  // cooled in between: the hot clock restarts
    CHECK_FALSE(actors::gpu::step(h, g, p, t));
  }
  auto g = reading(95);
  CHECK_FALSE(actors::gpu::step(h, g, p, 49));
  g = reading(95);
  CHECK(actors::gpu::step(h, g, p, 50));
}

TEST_CASE("health: an uncorrectable ECC error or a lost card is sick at once") {
  actors::gpu::health_params p{30, 0};
  actors::gpu::health_state h;
  auto g = reading(50);
  g.ecc_uncorrected = 2;
  CHECK(actors::gpu::step(h, g, p, 0));
  CHECK_THAT(g.health_reason, Catch::Contains("2 uncorrectable ECC"));
  actors::gpu::health_state lost;
  msg::gpu_sample gone;  // source unknown, but lost: the driver answered that it is gone
  gone.lost = true;
  CHECK(actors::gpu::step(lost, gone, p, 0));
  CHECK(gone.health == "sick");
  CHECK_THAT(gone.health_reason, Catch::Contains("lost"));
  auto back = reading(50);
  CHECK(actors::gpu::step(lost, back, p, 1));  // recover_s 0: well at the first clean reading
}

TEST_CASE("health: without telemetry there is no verdict") {
  actors::gpu::health_state h;
  msg::gpu_sample g;  // source "unknown", every number -1
  CHECK_FALSE(actors::gpu::step(h, g, {}, 0));
  CHECK(g.health == "unknown");
  CHECK_FALSE(h.known);
  // No slowdown threshold known: temperature alone is no fault.
  auto t = reading(120, -1);
  CHECK_FALSE(actors::gpu::step(h, t, {0, 0}, 1));
  CHECK(t.health == "ok");
}

TEST_CASE("power log: power held between readings, split by time among stages at once") {
  actors::gpu::power_log log(25);
  log.reading("c", 0, 100);     // 100 W from t=0
  log.reading("c", 20, 300);
  log.reading("c", 40, 0);
  log.reading("c", 60, 50);
  log.reading("c", 70, -1);     // unknown 70-80: nothing counts
  log.reading("c", 80, 10);
  log.reading("c", 79, 999);    // out of order: ignored
  // b runs from 10 (its end not known yet) while a is recorded over 0-30: a alone 0-10
  // (1000 J), with b 10-20 at 100 W (500 J) and 20-30 at 300 W (1500 J).
  CHECK(log.stage("a", {"c"}, 0, 30, {{"c", 10}, {"other card", 0}}) == Approx(1000 + 500 + 1500));
  // b, recorded later over 10-50, sees a: 10-20 (500 J), 20-30 (1500 J), alone 30-40 at
  // 300 W (3000 J), 40-50 at 0 W. Together they have what the card drew 0-50.
  CHECK(log.stage("b", {"c"}, 10, 50) == Approx(500 + 1500 + 3000));
  CHECK(log.card_joules("c", 0, 50) == Approx(1000 + 1000 + 6000));
  // A reading holds for 25 s at most: 60-70 at 50 W (500 J), unknown 70-80, 80-105 at 10 W.
  CHECK(log.card_joules("c", 55, 200) == Approx(500 + 250));
  // Recorded again: its hold replaced, not added (b alone now over 10-20 after a's change).
  CHECK(log.stage("a", {"c"}, 0, 10) == Approx(1000));
  CHECK(log.stage("b", {"c"}, 10, 50) == Approx(1000 + 6000));
  // A stage on two cards has both; one no reading covers has no known energy.
  log.reading("d", 0, 10);
  CHECK(log.stage("e", {"c", "d"}, 0, 10) == Approx(500 + 100));  // c shared with a
  CHECK(log.stage("f", {"nothing"}, 0, 10) == -1);
  CHECK(log.stage("g", {"c"}, 72, 78) == -1);
  CHECK(log.card_joules("nothing", 0, 10) == -1);
  // Forgetting (in batches) keeps the reading in force at the cut.
  actors::gpu::power_log old(1000, 100);
  for (int t = 0; t <= 3000; t += 10)
    old.reading("c", t, 1);
  old.forget(3000);
  CHECK(old.readings("c") == 11 + 1);
  CHECK(old.card_joules("c", 2900, 3000) == Approx(100));
  old.reading("c", 3010, 1);
  old.forget(3010);  // one more to drop: kept for the next batch
  CHECK(old.readings("c") == 13);
}
