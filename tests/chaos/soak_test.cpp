// The soak (tests/chaos/soak.hpp): `launch/soak [HOURS]` runs the full one (72 simulated
// hours by default, SOAK_* in the environment); launch/test runs a short one and the rule's
// own test. A failing soak keeps its directory and names it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/chaos/soak.hpp"

namespace {

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtod(v, nullptr) : fallback;
}

chaos::soak_params params_from_env(double hours, double sample_minutes) {
  chaos::soak_params p;
  p.hours = env_double("SOAK_HOURS", hours);
  p.time_scale = env_double("SOAK_TIME_SCALE", p.time_scale);
  p.seed = static_cast<uint64_t>(env_double("SOAK_SEED", 1));
  p.jobs_per_hour = env_double("SOAK_JOBS_PER_HOUR", p.jobs_per_hour);
  p.fault_min_minutes = env_double("SOAK_FAULT_MIN_MINUTES", p.fault_min_minutes);
  p.fault_max_minutes = env_double("SOAK_FAULT_MAX_MINUTES", p.fault_max_minutes);
  p.sample_minutes = env_double("SOAK_SAMPLE_MINUTES", sample_minutes);
  if (const char* d = std::getenv("SOAK_RECORD_DIR"); d != nullptr && *d != '\0')
    p.record_dir = d;
  return p;
}

void report(const chaos::soak_verdict& v, const chaos::soak_params& p) {
  std::printf("soak: %.2f simulated hours in %.0f s (time_scale %g, seed %llu), record in %s\n",
              v.sim_hours, v.real_s, p.time_scale, static_cast<unsigned long long>(p.seed),
              p.record_dir.c_str());
  std::printf("soak: %d runs, %d jobs: %d verified, %d failed, %d lost, %d corrupt, %d decoded "
              "twice, %d runs unfinished, %d runs unread, %d stages done twice per status\n",
              v.runs, v.jobs, v.verified, v.failed, v.lost, v.corrupt, v.duplicated,
              v.unfinished_runs, v.unread_runs, v.done_twice);
  std::printf("soak: faults: %d kill -9, %d SIGSTOP, %d link cuts, %d full disks; %d samples; "
              "longest harness turn %.1f s\n",
              v.kills, v.stops, v.link_cuts, v.full_disks, v.samples, v.longest_turn_s);
  for (auto& t : v.trends)
    std::printf("soak: %-4s %-8s %-17s first 2/3 max %14.0f  last 1/3 max %14.0f  bound %14.0f\n",
                t.ok ? "ok" : "GROW", t.host.c_str(), t.resource.c_str(), t.early_max,
                t.late_max, t.bound);
  for (auto& n : v.notes)
    std::printf("soak: note: %s\n", n.c_str());
  std::printf("RESULT soak_sim_hours %.2f h target -\n", v.sim_hours);
  std::printf("RESULT soak_jobs %d jobs target -\n", v.jobs);
  std::printf("RESULT soak_jobs_verified %d jobs target ==%d\n", v.verified, v.jobs);
  std::printf("RESULT soak_jobs_lost %d jobs target ==0\n", v.lost);
  std::printf("RESULT soak_jobs_decoded_twice %d jobs target ==0\n", v.duplicated);
  std::printf("RESULT soak_jobs_corrupt %d jobs target ==0\n", v.corrupt);
  std::printf("RESULT soak_gpu_s_paid_twice %.1f gpu_s target -\n", v.gpu_s_paid_twice);
  std::printf("RESULT soak_faults %d count target -\n",
              v.kills + v.stops + v.link_cuts + v.full_disks);
  std::printf("RESULT soak_resources_growing %zu series target ==0\n", v.growing().size());
  std::fflush(stdout);
}

/// Every resource must level off (the journal too, since retention compacts it).
void check(const chaos::soak_verdict& v) {
  std::string growing;
  std::vector<std::string> unexpected;
  for (auto& t : v.trends)
    if (!t.ok) {
      growing += t.host + "/" + t.resource + " ";
      unexpected.push_back(t.host + "/" + t.resource);
    }
  INFO("growing: " << growing);
  CHECK(v.jobs > 0);
  CHECK(v.verified == v.jobs);
  CHECK(v.failed == 0);
  CHECK(v.lost == 0);
  CHECK(v.corrupt == 0);
  CHECK(v.duplicated == 0);
  CHECK(v.unfinished_runs == 0);
  CHECK(v.unread_runs == 0);
  CHECK(v.samples > 0);
  CHECK(unexpected.empty());
}

} // namespace

TEST_CASE("soak rule: a resource that grows without bound fails, one that levels off passes") {
  std::vector<double> at, linear, level, restarts;
  for (int i = 0; i <= 72; ++i) {
    at.push_back(i);
    linear.push_back(1000.0 + 10.0 * i);                          // +720 over the soak
    level.push_back(2000.0 - 1000.0 * std::exp(-i / 6.0) + (i % 3));  // rises, then flat
    restarts.push_back(500.0 + 20.0 * (i % 12));                  // a restart every 12 h
  }
  CHECK_FALSE(chaos::soak_rule(at, linear, 72, 10).ok);
  CHECK(chaos::soak_rule(at, level, 72, 10).ok);
  CHECK(chaos::soak_rule(at, restarts, 72, 10).ok);
  // The slack lets a small absolute growth through, and no more.
  CHECK(chaos::soak_rule(at, linear, 72, 1000).ok);
  // No sample in one of the parts: not shown to level off.
  CHECK_FALSE(chaos::soak_rule({1, 2}, {1, 1}, 72, 10).ok);
}

TEST_CASE("soak: a short soak (SOAK_HOURS, 2 simulated hours by default)") {
  auto p = params_from_env(2, 5);
  chaos::soak s(p);
  auto v = s.run();
  report(v, s.params());
  check(v);
}

TEST_CASE("soak: SOAK_HOURS simulated hours (72 by default)", "[.soak]") {
  auto p = params_from_env(72, 10);
  chaos::soak s(p);
  auto v = s.run();
  report(v, s.params());
  check(v);
}
