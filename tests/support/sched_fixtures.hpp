#pragma once
// Small lines for the scheduler's tests: pools, one decoder, one mode, runs of uniform jobs,
// and a pool's status report. Each test states only what differs from these.

#include <cstdint>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"
#include "actors/planner/line_sim.hpp"
#include "tests/support/effects.hpp"

namespace sched_fixtures {

using namespace vidline;

struct pool_spec {
  std::string name, host, kind;
};

/// The pools as given, one decoder "dec" (kind "dk") on host "b", mode "m" over the pools in
/// the order given.
inline actors::coordinator::state line_of(const std::vector<pool_spec>& pools) {
  actors::coordinator::state s;
  for (auto& p : pools) {
    actors::coordinator::pool_view v;
    v.name = p.name;
    v.host = p.host;
    v.kind = p.kind;
    s.pools[p.name] = v;
    s.modes["m"].push_back(p.name);
  }
  actors::coordinator::decoder_view d;
  d.name = "dec";
  d.host = "b";
  d.kind = "dk";
  s.decoders["dec"] = d;
  s.mode_decoders["m"] = {"dec"};
  return s;
}

/// Pools p0..p(n-1) of kind "k" on host "a", as above.
inline actors::coordinator::state line_of(std::size_t n) {
  std::vector<pool_spec> pools;
  for (std::size_t k = 0; k < n; ++k)
    pools.push_back({"p" + std::to_string(k), "a", "k"});
  return line_of(pools);
}

/// Run `id` of mode "m": `count` jobs of one size, seeds 100, 101, ..., prompt "p".
inline actors::coordinator::run run_of(const std::string& id, uint32_t count, int32_t priority = 0,
                         uint32_t w = 416, uint32_t h = 736, uint32_t secs = 5) {
  actors::coordinator::run r;
  r.id = id;
  r.mode = "m";
  r.priority = priority;
  // Every fixture run renders: runs here are independent even where their shots are alike
  // (reuse by job key is scheduler_graph_test's, which says rerender itself).
  r.rerender = true;
  for (uint32_t i = 0; i < count; ++i) {
    actors::coordinator::job j;
    j.spec = msg::job_spec{id, i, 100 + i, w, h, secs, "p", "sha-p", ""};
    r.jobs.push_back(j);
  }
  return r;
}

/// Pool `pool` (on host "a") reports: epoch, sequence number, the attempt it runs (0: idle).
inline msg::pool_status pool_report(const std::string& pool, uint64_t epoch, uint64_t seq,
                                    uint64_t busy = 0) {
  msg::pool_status st;
  st.pool = pool;
  st.host = "a";
  st.epoch = epoch;
  st.seq = seq;
  st.busy_attempt = busy;
  return st;
}

/// Pool j.pool (on host "a") reports job j sampled: its latent, for the attempt it runs.
inline msg::sample_result sample_ok(const actors::coordinator::job& j) {
  msg::sample_result r;
  r.pool = j.pool;
  r.host = "a";
  r.attempt = j.attempt;
  r.run_id = j.spec.run_id;
  r.index = j.spec.index;
  r.outcome = msg::outcome::ok;
  r.latent_sha256 = std::string(64, 'a' + static_cast<char>(j.spec.index % 26));
  r.latent_bytes = 1000;
  return r;
}

/// Every pool samples in 15 s cold, 10 s warm; no conditioning; handoff 1 s; decode 4 s;
/// latents of 13 MB.
inline actors::planner::timing simple_timing() {
  actors::planner::timing t;
  t.sample = [](const std::string&, const msg::job_spec&, bool cold) {
    return actors::planner::sample_time{cold ? 15.0 : 10.0, false};
  };
  t.conditioning = [](const std::string&) { return 0.0; };
  t.handoff = [](const std::string&, uint64_t) { return 1.0; };
  t.decode = [](const std::string&, const msg::job_spec&) { return 4.0; };
  t.latent_bytes = [](const msg::job_spec&) { return uint64_t{13000000}; };
  return t;
}

/// Two pools on host "a" ("a1" of kind "k1", "a2" of kind "k2"), the decoder on host "b".
inline actors::coordinator::state two_pools_one_decoder() {
  return line_of({{"a1", "a", "k1"}, {"a2", "a", "k2"}});
}

using testing_support::all_of;

} // namespace sched_fixtures
