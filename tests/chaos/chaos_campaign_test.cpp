// The fault-injection campaign (tests/chaos/harness.hpp). launch/test runs 50 scenarios in
// five groups; launch/chaos N runs N (CHAOS_SCENARIOS, CHAOS_FIRST_SEED) and prints RESULT
// lines. A failing scenario prints its seed; CHAOS_FIRST_SEED=<seed> CHAOS_SCENARIOS=1
// reruns it (real processes: the faults and their times repeat, the interleaving may not).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>

#include "tests/chaos/harness.hpp"

namespace {

struct totals {
  int scenarios = 0, jobs = 0, succeeded = 0, lost = 0, duplicated = 0, corrupt = 0,
      unfinished = 0, failed = 0, resampled = 0, faults = 0, kills = 0, stops = 0,
      crash_exits = 0, backend_faults = 0, link_cuts = 0, full_disks = 0, fenced = 0,
      reported_twice = 0;
  double gpu_s_paid_twice = 0;
  int sampling_lost = 0;
  std::vector<double> paid_per_lost_attempt_s;
  std::vector<uint64_t> bad_seeds;
  void add(const chaos::verdict& v) {
    ++scenarios;
    jobs += v.jobs;
    succeeded += v.succeeded;
    lost += v.lost;
    duplicated += v.duplicated;
    corrupt += v.corrupt;
    unfinished += v.unfinished;
    failed += v.failed;
    resampled += v.resampled;
    faults += v.faults;
    kills += v.kills;
    stops += v.stops;
    crash_exits += v.crash_exits;
    backend_faults += v.backend_faults;
    link_cuts += v.link_cuts;
    full_disks += v.full_disks;
    fenced += v.fenced;
    reported_twice += v.reported_twice;
    gpu_s_paid_twice += v.gpu_s_paid_twice;
    sampling_lost += v.sampling_lost;
    paid_per_lost_attempt_s.insert(paid_per_lost_attempt_s.end(),
                                   v.paid_per_lost_attempt_s.begin(),
                                   v.paid_per_lost_attempt_s.end());
    if (!v.ok())
      bad_seeds.push_back(v.seed);
  }
};

totals campaign(uint64_t first_seed, int count) {
  totals t;
  for (int i = 0; i < count; ++i) {
    chaos::scenario sc(first_seed + static_cast<uint64_t>(i));
    auto v = sc.run();
    std::printf("%s %s\n", v.ok() ? "ok  " : "FAIL", v.describe().c_str());
    std::fflush(stdout);
    t.add(v);
  }
  return t;
}

void check(const totals& t) {
  std::string seeds;
  for (auto s : t.bad_seeds)
    seeds += std::to_string(s) + " ";
  INFO("failing seeds: " << seeds);
  CHECK(t.lost == 0);
  CHECK(t.duplicated == 0);
  CHECK(t.corrupt == 0);
  CHECK(t.unfinished == 0);
}

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

} // namespace

TEST_CASE("chaos: scenarios 1-10") { check(campaign(1, 10)); }
TEST_CASE("chaos: scenarios 11-20") { check(campaign(11, 10)); }
TEST_CASE("chaos: scenarios 21-30") { check(campaign(21, 10)); }
TEST_CASE("chaos: scenarios 31-40") { check(campaign(31, 10)); }
TEST_CASE("chaos: scenarios 41-50") { check(campaign(41, 10)); }

TEST_CASE("chaos: campaign of CHAOS_SCENARIOS scenarios", "[.campaign]") {
  auto first = env_u64("CHAOS_FIRST_SEED", 1000);
  int n = static_cast<int>(env_u64("CHAOS_SCENARIOS", 100));
  auto t = campaign(first, n);
  std::printf("RESULT chaos_scenarios %d count target >=1\n", t.scenarios);
  std::printf("RESULT chaos_jobs %d count target -\n", t.jobs);
  std::printf("RESULT chaos_faults %d count target -\n", t.faults);
  std::printf("RESULT chaos_kill9 %d count target -\n", t.kills);
  std::printf("RESULT chaos_sigstop %d count target -\n", t.stops);
  std::printf("RESULT chaos_crash_points_fired %d count target -\n", t.crash_exits);
  std::printf("RESULT chaos_backend_faults %d count target -\n", t.backend_faults);
  std::printf("RESULT chaos_link_cuts %d count target -\n", t.link_cuts);
  std::printf("RESULT chaos_full_disks %d count target -\n", t.full_disks);
  std::printf("RESULT chaos_lost %d jobs target ==0\n", t.lost);
  std::printf("RESULT chaos_duplicated %d jobs target ==0\n", t.duplicated);
  std::printf("RESULT chaos_corrupt %d jobs target ==0\n", t.corrupt);
  std::printf("RESULT chaos_unfinished %d runs target ==0\n", t.unfinished);
  std::printf("RESULT chaos_failed_reported %d jobs target -\n", t.failed);
  std::printf("RESULT chaos_resampled %d latents target -\n", t.resampled);
  std::printf("RESULT chaos_fenced %d products target -\n", t.fenced);
  std::printf("RESULT chaos_done_twice_per_status %d stages target -\n", t.reported_twice);
  std::printf("RESULT chaos_gpu_s_paid_twice %.1f gpu_s target -\n", t.gpu_s_paid_twice);
  std::printf("RESULT chaos_gpu_s_paid_twice_per_fault %.1f gpu_s target -\n",
              t.faults > 0 ? t.gpu_s_paid_twice / t.faults : 0.0);
  std::printf("RESULT chaos_sampling_attempts_lost %d count target -\n", t.sampling_lost);
  auto per = t.paid_per_lost_attempt_s;
  std::sort(per.begin(), per.end());
  double sum = 0;
  for (double x : per)
    sum += x;
  std::printf("RESULT chaos_paid_twice_per_lost_attempt_mean %.1f s_per_gpu target -\n",
              per.empty() ? 0.0 : sum / per.size());
  std::printf("RESULT chaos_paid_twice_per_lost_attempt_p50 %.1f s_per_gpu target -\n",
              per.empty() ? 0.0 : per[per.size() / 2]);
  std::printf("RESULT chaos_paid_twice_per_lost_attempt_max %.1f s_per_gpu target -\n",
              per.empty() ? 0.0 : per.back());
  std::printf("chaos: GPU-s paid twice per lost attempt and GPU, each job's, sorted:");
  for (double x : per)
    std::printf(" %.1f", x);
  std::printf("\n");
  check(t);
}
