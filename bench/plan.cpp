// bench_plan: how faithful and how good the planner is, measured side by side in one run.
//
// 1. The reference's 8 measured batch rows, planned on the embedded reference cluster and
//    profile with the modes' default policy (in_turn, as the reference dispatched), and with
//    first_free for comparison: makespan error per row.
// 2. A grid: 3 clusters (the reference and two others below) x the 4 measured sizes x
//    counts 1, 6, 30, 120. Every fixed mode of the cluster against auto: auto must never be
//    worse than the best fixed mode; for counts >= 30 its steady-state throughput must be
//    within 3% of the upper bound (the best layout's sum of warm sampling rates, capped by
//    the decoders' rate).
//
// Ends with RESULT lines.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <vidline/embedded_config.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/planner/plan.hpp"
#include "actors/planner/reference_rows.hpp"

using namespace vidline;

namespace {

/// Two servers of 8 x T10 (each 8 or 4+4), the XTX, and two decoders of different speed.
constexpr const char* two_servers = R"json({
  "cluster": "two_servers", "coordinator": "host_a",
  "hosts": [
    {"name": "host_a", "address": "127.0.0.1", "port": 7611, "data_dir": "/tmp/vidline-bench/a",
     "gpus": [
       {"id": "t10-0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 0},
       {"id": "t10-1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 1},
       {"id": "t10-2", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 2},
       {"id": "t10-3", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 3},
       {"id": "t10-4", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 4},
       {"id": "t10-5", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 5},
       {"id": "t10-6", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 6},
       {"id": "t10-7", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 7}]},
    {"name": "host_b", "address": "127.0.0.1", "port": 7612, "data_dir": "/tmp/vidline-bench/b",
     "gpus": [
       {"id": "rtx3080ti", "model": "RTX 3080 Ti", "vendor": "nvidia", "memory_gib": 12, "index": 0},
       {"id": "xtx", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 0}]},
    {"name": "host_c", "address": "127.0.0.1", "port": 7613, "data_dir": "/tmp/vidline-bench/c",
     "gpus": [
       {"id": "t10-0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 0},
       {"id": "t10-1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 1},
       {"id": "t10-2", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 2},
       {"id": "t10-3", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 3},
       {"id": "t10-4", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 4},
       {"id": "t10-5", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 5},
       {"id": "t10-6", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 6},
       {"id": "t10-7", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 7},
       {"id": "t10-8", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 8}]}],
  "backends": {"sim": {"type": "sim", "time_scale": 0.01, "profile": ""}},
  "pools": [
    {"name": "eight", "host": "host_a", "backend": "sim", "profile": "t10x8",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3", "t10-4", "t10-5", "t10-6", "t10-7"]},
    {"name": "four_a", "host": "host_a", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]},
    {"name": "four_b", "host": "host_a", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-4", "t10-5", "t10-6", "t10-7"]},
    {"name": "xtx", "host": "host_b", "gpus": ["xtx"], "backend": "sim", "profile": "xtx"},
    {"name": "eight_c", "host": "host_c", "backend": "sim", "profile": "t10x8",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3", "t10-4", "t10-5", "t10-6", "t10-7"]},
    {"name": "four_c", "host": "host_c", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]},
    {"name": "four_d", "host": "host_c", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-4", "t10-5", "t10-6", "t10-7"]}],
  "decoders": [
    {"name": "rtx3080ti", "host": "host_b", "gpu": "rtx3080ti", "backend": "sim", "profile": "rtx3080ti"},
    {"name": "t10dec", "host": "host_c", "gpu": "t10-8", "backend": "sim", "profile": "t10"}],
  "encoders": [
    {"name": "encoder_a", "host": "host_a", "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"], "backend": "sim", "profile": "t10x4"},
    {"name": "encoder_b", "host": "host_b", "gpus": ["xtx"], "backend": "sim", "profile": "xtx"},
    {"name": "encoder_c", "host": "host_c", "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"], "backend": "sim", "profile": "t10x4"}],
  "modes": {
    "eights_xtx": {"pools": ["eight", "eight_c", "xtx"], "decoders": ["rtx3080ti", "t10dec"]},
    "fours_xtx": {"pools": ["four_a", "four_b", "four_c", "four_d", "xtx"], "decoders": ["rtx3080ti", "t10dec"]},
    "mixed": {"pools": ["eight", "four_c", "four_d", "xtx"], "decoders": ["rtx3080ti", "t10dec"]},
    "fours_one_decoder": {"pools": ["four_a", "four_b", "four_c", "four_d"], "decoders": ["rtx3080ti"]}
  }
})json";

/// Four XTX cards and a 4 x T10 pool feeding one slow decoder (a lone T10): decoder-bound.
constexpr const char* xtx_farm = R"json({
  "cluster": "xtx_farm", "coordinator": "host_d",
  "hosts": [
    {"name": "host_d", "address": "127.0.0.1", "port": 7621, "data_dir": "/tmp/vidline-bench/d",
     "gpus": [
       {"id": "xtx-0", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 0},
       {"id": "xtx-1", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 1},
       {"id": "xtx-2", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 2},
       {"id": "xtx-3", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 3}]},
    {"name": "host_e", "address": "127.0.0.1", "port": 7622, "data_dir": "/tmp/vidline-bench/e",
     "gpus": [
       {"id": "t10-0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 0},
       {"id": "t10-1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 1},
       {"id": "t10-2", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 2},
       {"id": "t10-3", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 3},
       {"id": "t10-4", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 4}]}],
  "backends": {"sim": {"type": "sim", "time_scale": 0.01, "profile": ""}},
  "pools": [
    {"name": "xtx_0", "host": "host_d", "gpus": ["xtx-0"], "backend": "sim", "profile": "xtx"},
    {"name": "xtx_1", "host": "host_d", "gpus": ["xtx-1"], "backend": "sim", "profile": "xtx"},
    {"name": "xtx_2", "host": "host_d", "gpus": ["xtx-2"], "backend": "sim", "profile": "xtx"},
    {"name": "xtx_3", "host": "host_d", "gpus": ["xtx-3"], "backend": "sim", "profile": "xtx"},
    {"name": "four_e", "host": "host_e", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]}],
  "decoders": [
    {"name": "t10dec", "host": "host_e", "gpu": "t10-4", "backend": "sim", "profile": "t10"}],
  "encoders": [
    {"name": "encoder_d", "host": "host_d", "gpus": ["xtx-0"], "backend": "sim", "profile": "xtx"},
    {"name": "encoder_e", "host": "host_e", "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"], "backend": "sim", "profile": "t10x4"}],
  "modes": {
    "all_xtx": {"pools": ["xtx_0", "xtx_1", "xtx_2", "xtx_3"], "decoders": ["t10dec"]},
    "xtx_and_four": {"pools": ["xtx_0", "xtx_1", "xtx_2", "xtx_3", "four_e"], "decoders": ["t10dec"]},
    "two_xtx": {"pools": ["xtx_0", "xtx_1"], "decoders": ["t10dec"]},
    "four_only": {"pools": ["four_e"], "decoders": ["t10dec"]}
  }
})json";

struct setup {
  std::string name;
  config::cluster cluster;
  std::shared_ptr<planner::profile_estimates> est;
  sched::state state;
};

setup make_setup(const std::string& name, const char* json,
                 const std::map<std::string, std::string>& policies = {}) {
  setup s;
  s.name = name;
  s.cluster = config::parse(json, "");
  s.est = std::make_shared<planner::profile_estimates>(s.cluster,
                                                       backends::sim::profile::reference());
  s.state = actors::initial_state(s.cluster, 1.0);
  planner::configure(s.state, s.cluster, s.est, policies);
  return s;
}

planner::plan_result plan(const setup& s, const std::string& mode, uint32_t w, uint32_t h,
                          uint32_t secs, uint32_t count) {
  planner::request req;
  req.mode = mode;
  req.width = w;
  req.height = h;
  req.seconds = secs;
  req.count = count;
  req.seed = 987654321123ull;
  return planner::plan(s.state, *s.est, req);
}

bool complete(const planner::plan_result& p, uint32_t count) {
  return p.refused.empty() && p.finished && p.summary.succeeded == count
         && p.violations.empty();
}

/// The steady-state upper bound in clips per second: the best layout's sum of warm sampling
/// rates (pools sharing GPUs: the best set of them that runs together), capped by the sum of
/// the decoders' rates.
double upper_bound(const setup& s, uint32_t w, uint32_t h, uint32_t secs) {
  const auto& prof = s.est->profile();
  backends::sim::job_size size{w, h, secs};
  std::vector<std::string> pools;
  for (auto& p : s.cluster.pools)
    if (prof.fits(p.profile_key, size))
      pools.push_back(p.name);
  auto rate = [&](const std::string& name) {
    auto& pv = s.state.pools.at(name);
    return 1 / prof.sampling(pv.kind, size, backends::sim::model_state::warm).s;
  };
  auto conflict = [&](const std::string& a, const std::string& b) {
    return s.state.pools.at(a).conflicts.count(b) != 0;
  };
  // Every set of pools that can run together (the clusters here are small).
  double best = 0;
  const std::size_t n = pools.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    bool ok = true;
    double sum = 0;
    for (std::size_t a = 0; a < n && ok; ++a) {
      if (!(mask >> a & 1))
        continue;
      sum += rate(pools[a]);
      for (std::size_t b = a + 1; b < n && ok; ++b)
        if ((mask >> b & 1) && conflict(pools[a], pools[b]))
          ok = false;
    }
    if (ok)
      best = std::max(best, sum);
  }
  double decode = 0;
  for (auto& d : s.cluster.decoders)
    decode += 1 / prof.decode(d.profile_key, size).s;
  return std::min(best, decode);
}

/// The makespan of a line that runs at the steady-state rates after an unavoidable ramp:
/// each pool of a layout finishes its first clip at conditioning + cold sampling + handoff +
/// decode (on its best decoder, no queue) and then one more every warm sampling time; the
/// count-th earliest of those clips; no sooner than the decoders' summed rate allows from
/// the first latent on. The best layout. No schedule that keeps one layout does better.
double makespan_bound(const setup& s, uint32_t w, uint32_t h, uint32_t secs, uint32_t count) {
  const auto& prof = s.est->profile();
  backends::sim::job_size size{w, h, secs};
  msg::job_spec spec;
  spec.width = w;
  spec.height = h;
  spec.seconds = secs;
  struct source { std::string name; double first, warm; };
  std::vector<source> pools;
  double earliest_latent = 1e300, decode_rate = 0;
  for (auto& d : s.cluster.decoders)
    decode_rate += 1 / prof.decode(d.profile_key, size).s;
  for (auto& p : s.cluster.pools) {
    if (!prof.fits(p.profile_key, size))
      continue;
    double cond = s.est->conditioning(p.host);
    double cold = prof.sampling(p.profile_key, size, backends::sim::model_state::cold).s;
    double warm = prof.sampling(p.profile_key, size, backends::sim::model_state::warm).s;
    double tail = 1e300;
    for (auto& d : s.state.decoders)
      tail = std::min(tail, s.est->handoff(p.host, d.second, spec) + s.est->decode(d.second, spec));
    pools.push_back({p.name, cond + cold + tail, warm});
    earliest_latent = std::min(earliest_latent, cond + cold);
  }
  auto conflict = [&](const std::string& a, const std::string& b) {
    return s.state.pools.at(a).conflicts.count(b) != 0;
  };
  double best = 1e300;
  const std::size_t n = pools.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    bool ok = true;
    for (std::size_t a = 0; a < n && ok; ++a)
      for (std::size_t b = a + 1; b < n && ok; ++b)
        if ((mask >> a & 1) && (mask >> b & 1) && conflict(pools[a].name, pools[b].name))
          ok = false;
    if (!ok)
      continue;
    // Smallest T by which the pools finish `count` whole clips.
    double lo = 0, hi = 1e9;
    for (int i = 0; i < 200; ++i) {
      double mid = (lo + hi) / 2, done = 0;
      for (std::size_t a = 0; a < n; ++a)
        if ((mask >> a & 1) && mid >= pools[a].first)
          done += std::floor((mid - pools[a].first) / pools[a].warm + 1e-9) + 1;
      (done >= count ? hi : lo) = mid;
    }
    best = std::min(best, hi);
  }
  return std::max(best, earliest_latent + count / decode_rate);
}

} // namespace

int main() {
  std::printf("bench_plan: the planner against the reference line, and auto against every "
              "fixed mode\n\n");

  // -- 1. the reference rows -----------------------------------------------------------------
  auto ref = make_setup("reference", embedded::reference_config);
  std::map<std::string, std::string> greedy;
  for (auto& m : ref.cluster.modes)
    greedy[m.name] = "first_free";
  auto ref_greedy = make_setup("reference", embedded::reference_config, greedy);
  std::printf("The reference's 6-job batches (measurements.md) planned on the embedded "
              "cluster and profile:\n");
  std::printf("%-22s %-24s %10s %10s %8s %10s %8s | %10s %8s\n", "row", "mode", "measured",
              "in_turn", "error", "first", "error", "first_free", "error");
  std::vector<std::pair<std::string, double>> row_errors;
  double worst_row = 0;
  for (auto& r : planner::reference_rows) {
    auto p = plan(ref, std::string(r.mode), r.width, r.height, r.seconds, r.count);
    auto g = plan(ref_greedy, std::string(r.mode), r.width, r.height, r.seconds, r.count);
    double err = 100 * (p.summary.makespan_s / r.makespan_s - 1);
    double ferr = 100 * (p.summary.first_finish_s / r.first_s - 1);
    double gerr = 100 * (g.summary.makespan_s / r.makespan_s - 1);
    std::printf("%-22s %-24s %10.3f %10.1f %+7.1f%% %10.1f %+7.1f%% | %10.1f %+7.1f%%\n",
                std::string(r.name).c_str(), std::string(r.mode).c_str(), r.makespan_s,
                p.summary.makespan_s, err, p.summary.first_finish_s, ferr, g.summary.makespan_s,
                gerr);
    row_errors.emplace_back(std::string(r.name), err);
    worst_row = std::max(worst_row, std::abs(err));
  }
  std::printf("\n");

  // -- 2. the grid ---------------------------------------------------------------------------
  std::vector<setup> clusters;
  clusters.push_back(std::move(ref));
  clusters.push_back(make_setup("two_servers", two_servers));
  clusters.push_back(make_setup("xtx_farm", xtx_farm));
  const std::vector<std::array<uint32_t, 3>> sizes = {
    {416, 736, 5}, {736, 1280, 5}, {544, 960, 15}, {736, 1280, 10}};
  const std::vector<uint32_t> counts = {1, 6, 30, 120};

  double worst_vs_fixed = -1e9;   // (auto / best fixed - 1) in %, the largest
  int cells = 0, worse_cells = 0, incomplete = 0;
  double worst_bound = 1e9, worst_whole = 1e9, worst_bound_120 = 1e9, worst_whole_120 = 1e9;
  std::printf("%-12s %-14s %5s | %-22s %9s | %9s %8s | %9s %9s | %9s %9s\n", "cluster", "size",
              "count", "best fixed mode", "makespan", "auto", "vs best", "UB clip/h", "whole",
              "bound s", "vs bound");
  for (auto& c : clusters) {
    for (auto& sz : sizes) {
      double ub = upper_bound(c, sz[0], sz[1], sz[2]) * 3600;
      for (uint32_t n : counts) {
        std::string best_mode = "-";
        double best = 1e300;
        for (auto& m : c.cluster.modes) {
          auto p = plan(c, m.name, sz[0], sz[1], sz[2], n);
          if (complete(p, n) && p.summary.makespan_s < best) {
            best = p.summary.makespan_s;
            best_mode = m.name;
          }
        }
        auto a = plan(c, planner::auto_mode, sz[0], sz[1], sz[2], n);
        char size_text[32];
        std::snprintf(size_text, sizeof(size_text), "%ux%ux%u", sz[0], sz[1], sz[2]);
        if (!complete(a, n)) {
          ++incomplete;
          std::printf("%-12s %-14s %5u | auto did not finish: %s\n", c.name.c_str(), size_text,
                      n, a.refused.c_str());
          continue;
        }
        ++cells;
        double vs = best < 1e300 ? 100 * (a.summary.makespan_s / best - 1) : 0;
        worst_vs_fixed = std::max(worst_vs_fixed, vs);
        if (vs > 1e-6)
          ++worse_cells;
        double bound = makespan_bound(c, sz[0], sz[1], sz[2], n);
        double vs_bound = bound / a.summary.makespan_s;
        double whole = a.summary.clips_per_hour / ub;
        if (n >= 30) {
          worst_bound = std::min(worst_bound, vs_bound);
          worst_whole = std::min(worst_whole, whole);
        }
        if (n >= 120) {
          worst_bound_120 = std::min(worst_bound_120, vs_bound);
          worst_whole_120 = std::min(worst_whole_120, whole);
        }
        std::printf("%-12s %-14s %5u | %-22s %9.1f | %9.1f %+7.2f%% | %9.2f %9.3f | %9.1f %9.3f\n",
                    c.name.c_str(), size_text, n, best_mode.c_str(),
                    best < 1e300 ? best : 0.0, a.summary.makespan_s, vs, ub, whole, bound,
                    vs_bound);
      }
    }
  }
  std::printf("\nUB: the steady-state upper bound, the best layout's summed warm sampling rates\n"
              "capped by the decoders'; whole = auto's clips/hour over the whole makespan / UB\n"
              "(a batch also pays its ramp: conditioning, cold models, the first decode).\n"
              "bound: the makespan of a line at those steady-state rates after the unavoidable\n"
              "ramp (each pool's first clip at conditioning + cold + handoff + decode, then one\n"
              "per warm sampling time, whole clips; decoders at their rate; best layout);\n"
              "vs bound = bound / auto's makespan.\n\n");

  for (auto& [row, err] : row_errors)
    std::printf("RESULT plan_error_%s %.1f %% target <=10\n", row.c_str(), std::abs(err));
  std::printf("RESULT plan_error_worst %.1f %% target <=10\n", worst_row);
  std::printf("RESULT auto_vs_best_fixed_worst %+.2f %% target <=0\n", worst_vs_fixed);
  std::printf("RESULT auto_cells_worse_than_best_fixed %d of %d target ==0\n", worse_cells,
              cells);
  std::printf("RESULT auto_cells_unfinished %d cells target ==0\n", incomplete);
  std::printf("RESULT auto_count30plus_vs_ramp_bound_worst %.3f ratio target >=0.97\n",
              worst_bound);
  std::printf("RESULT auto_count30plus_whole_run_vs_steady_upper_bound_worst %.3f ratio target >=0.97\n",
              worst_whole);
  std::printf("RESULT auto_count120_vs_ramp_bound_worst %.3f ratio target >=0.97\n",
              worst_bound_120);
  std::printf("RESULT auto_count120_whole_run_vs_steady_upper_bound_worst %.3f ratio target >=0.97\n",
              worst_whole_120);
  bool ok = worst_row <= 10 && worse_cells == 0 && incomplete == 0 && worst_bound >= 0.97;
  return ok ? 0 : 1;
}
