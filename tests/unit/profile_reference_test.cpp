// The reference profile against the reference batch rows: a small greedy model of the
// line (conditioning once per host, each pool takes the next job when free, cold first
// job, one decoder in arrival order) must land within 10% of every measured row but one,
// which docs/profile.md explains.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "config/profile/profile.hpp"

namespace {

using namespace vidline::config::profile;

struct pool_state {
  std::string kind;
  double free_at = 0;
  int done = 0;
};

struct row {
  std::string mode;
  job_size size;
  std::vector<std::string> pools;
  double first, makespan;
};

/// First and last video of a 6-job batch, in run-clock seconds from submission.
std::pair<double, double> replay(const profile& p, const row& r) {
  std::vector<pool_state> pools;
  for (const auto& k : r.pools)  // host A's encoder conditions for the T10 pools, the XTX its own
    pools.push_back({k, p.conditioning(k == "rx7900xtx" ? "rx7900xtx" : "t10x4").s, 0});
  std::vector<double> arrivals;
  for (int job = 0; job < 6; ++job) {
    auto next = std::min_element(pools.begin(), pools.end(), [](const auto& a, const auto& b) {
      return a.free_at < b.free_at;
    });
    auto state = next->done == 0 ? model_state::cold : model_state::warm;
    next->free_at += p.sampling(next->kind, r.size, state).s;
    next->done++;
    bool same_host = next->kind == "rx7900xtx";  // the XTX shares host B with the decoder
    arrivals.push_back(next->free_at + p.handoff(same_host).s);
  }
  std::sort(arrivals.begin(), arrivals.end());
  double decoder_free = 0, first = 0;
  for (double a : arrivals) {
    decoder_free = std::max(decoder_free, a) + p.decode("rtx3080ti", r.size).s;
    if (first == 0)
      first = decoder_free;
  }
  return {first, decoder_free};
}

} // namespace

TEST_CASE("the reference profile reproduces the reference batch rows", "[profile]") {
  auto p = profile::reference();
  job_size small{416, 736, 5}, large{736, 1280, 5};
  std::vector<row> rows = {
      {"single_eight_plus_one", small, {"t10x8"}, 133.314, 440.791},
      {"four_four_plus_one", small, {"t10x4", "t10x4"}, 146.396, 296.917},
      {"four_four_xtx_plus_one", small, {"t10x4", "t10x4", "rx7900xtx"}, 147.707, 266.324},
      {"eight_xtx_plus_one", small, {"t10x8", "rx7900xtx"}, 136.910, 332.706},
      {"single_eight_plus_one", large, {"t10x8"}, 238.642, 1024.217},
      {"eight_xtx_plus_one", large, {"t10x8", "rx7900xtx"}, 241.279, 945.328},
      {"four_four_plus_one", large, {"t10x4", "t10x4"}, 346.771, 902.538},
      {"four_four_xtx_plus_one", large, {"t10x4", "t10x4", "rx7900xtx"}, 352.477, 677.538},
  };
  for (const row& r : rows) {
    auto [first, makespan] = replay(p, r);
    double first_err = first / r.first - 1, makespan_err = makespan / r.makespan - 1;
    CAPTURE(r.mode, r.size.str(), first, makespan, first_err, makespan_err);
    CHECK(std::abs(first_err) <= 0.10);
    if (r.mode == "eight_xtx_plus_one" && r.size == large) {
      // Known: greedy dispatch gives the XTX 2 of these 6 jobs; the reference handed them
      // out in turn and the XTX took 3, which the XTX numbers are fitted to (docs/profile.md,
      // "Dispatch"; the planner's in_turn policy reproduces this row).
      CHECK(makespan_err < -0.20);
      CHECK(makespan_err > -0.30);
    } else {
      CHECK(std::abs(makespan_err) <= 0.10);
    }
  }
}
