// The GPU health rule and the energy meter (actors/gpu/health.hpp): pure, time given.
#include <catch2/catch.hpp>

#include "actors/gpu/health.hpp"

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

} // namespace

TEST_CASE("health: hot above slowdown for longer than hot_s is sick, recovers after recover_s") {
  gpu::health_params p{30, 60};
  gpu::health_state h;
  auto g = reading(95);
  CHECK_FALSE(gpu::step(h, g, p, 0));
  CHECK(g.health == "ok");
  g = reading(95);
  CHECK_FALSE(gpu::step(h, g, p, 29));
  g = reading(95);
  CHECK(gpu::step(h, g, p, 30));  // hot for 30 s: sick
  CHECK(g.health == "sick");
  CHECK_THAT(g.health_reason, Catch::Contains("slowdown") && Catch::Contains("95"));
  // Cool: still sick until recover_s passed without a condition.
  g = reading(70);
  CHECK_FALSE(gpu::step(h, g, p, 40));
  CHECK(g.health == "sick");
  g = reading(70);
  CHECK_FALSE(gpu::step(h, g, p, 99));
  // Hot again (briefly) restarts the recovery clock only once it is hot for hot_s.
  g = reading(91);
  CHECK_FALSE(gpu::step(h, g, p, 99.5));
  g = reading(70);
  CHECK(gpu::step(h, g, p, 100));  // 60 s since 40 with no condition holding
  CHECK(g.health == "ok");
  CHECK(g.health_reason.empty());
}

TEST_CASE("health: a short spike above slowdown is no fault") {
  gpu::health_params p{30, 60};
  gpu::health_state h;
  for (double t : {0.0, 10.0, 20.0}) {
    auto g = reading(t == 10.0 ? 70 : 95);  // cooled in between: the hot clock restarts
    CHECK_FALSE(gpu::step(h, g, p, t));
  }
  auto g = reading(95);
  CHECK_FALSE(gpu::step(h, g, p, 49));
  g = reading(95);
  CHECK(gpu::step(h, g, p, 50));
}

TEST_CASE("health: an uncorrectable ECC error or a lost card is sick at once") {
  gpu::health_params p{30, 0};
  gpu::health_state h;
  auto g = reading(50);
  g.ecc_uncorrected = 2;
  CHECK(gpu::step(h, g, p, 0));
  CHECK_THAT(g.health_reason, Catch::Contains("2 uncorrectable ECC"));
  gpu::health_state lost;
  msg::gpu_sample gone;  // source unknown, but lost: the driver answered that it is gone
  gone.lost = true;
  CHECK(gpu::step(lost, gone, p, 0));
  CHECK(gone.health == "sick");
  CHECK_THAT(gone.health_reason, Catch::Contains("lost"));
  auto back = reading(50);
  CHECK(gpu::step(lost, back, p, 1));  // recover_s 0: well at the first clean reading
}

TEST_CASE("health: without telemetry there is no verdict") {
  gpu::health_state h;
  msg::gpu_sample g;  // source "unknown", every number -1
  CHECK_FALSE(gpu::step(h, g, {}, 0));
  CHECK(g.health == "unknown");
  CHECK_FALSE(h.known);
  // No slowdown threshold known: temperature alone is no fault.
  auto t = reading(120, -1);
  CHECK_FALSE(gpu::step(h, t, {0, 0}, 1));
  CHECK(t.health == "ok");
}

TEST_CASE("energy: power held between readings, split by time among the owners at once") {
  gpu::energy_meter m;
  m.reading(0, 100);            // 100 W from t=0
  m.own("a", true, 0);
  m.own("b", true, 10);         // a alone 0-10: 1000 J
  m.reading(20, 300);           // a and b 10-20 at 100 W: 500 J each
  m.own("a", false, 30);        // 20-30 at 300 W shared: 1500 J each
  m.reading(40, 0);             // b alone 30-40 at 300 W: 3000 J
  m.own("b", false, 50);        // 40-50 at 0 W
  m.reading(60, 50);            // nobody: 60-... counts to the card only
  m.reading(70, -1);            // 60-70 at 50 W: 500 J to nobody
  m.reading(80, 10);            // unknown power 70-80: nothing
  CHECK(m.joules("a") == Approx(1000 + 500 + 1500));
  CHECK(m.joules("b") == Approx(500 + 1500 + 3000));
  CHECK(m.total() == Approx(1000 + 1000 + 3000 + 3000 + 500));
  CHECK(m.joules("nobody") == 0);
  m.forget("a");
  CHECK(m.joules("a") == 0);
}
