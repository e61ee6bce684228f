// bench_plan: how faithful and how good the planner is, measured side by side in one run.
//
// 1. The reference's 8 measured batch rows, planned on the embedded reference cluster and
//    profile with the modes' default policy (in_turn, as the reference dispatched), and with
//    first_free for comparison: makespan error per row.
// 2. A grid: 3 clusters (the reference and two others below) x the 4 measured sizes x
//    counts 1, 6, 30, 120. Every fixed mode of the cluster against auto: auto must never be
//    worse than the best fixed mode; for counts >= 30 its steady-state throughput must be
//    within 3% of the upper bound UB (the best layout's sum of warm sampling rates, capped by
//    the decoders' rate). Steady-state throughput: the clips finished after the line is
//    full (every pool taking part has written its first video), per hour, from then to the
//    last finish. Also shown: (count - 1) clips over (last finish - first finish), the
//    whole run's clips/hour, and a ramp-aware makespan bound.
// 3. The issue's example (736x1280x5 x 6 on the reference cluster) against the best
//    schedule the model allows, found by exhaustive search with line_sim (`--search N`:
//    the same for every size and counts 1..N).
//
// Ends with RESULT lines.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <vidline/embedded_config.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/planner/plan.hpp"
#include "actors/planner/reference_rows.hpp"
#include "bench/episode.hpp"
#include "common/sha256.hpp"

using namespace vidline;

namespace {

/// Two servers of 8 x T10 (each 8 or 4+4), the XTX, and two decoders of different speed.
constexpr const char* two_servers = R"json({
  "cluster": "two_servers", "coordinator": "host_a", "plaintext": true,
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
    {"name": "xtx", "host": "host_b", "gpus": ["xtx"], "backend": "sim", "profile": "rx7900xtx"},
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
    {"name": "encoder_b", "host": "host_b", "gpus": ["xtx"], "backend": "sim", "profile": "rx7900xtx"},
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
  "cluster": "xtx_farm", "coordinator": "host_d", "plaintext": true,
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
    {"name": "xtx_0", "host": "host_d", "gpus": ["xtx-0"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "xtx_1", "host": "host_d", "gpus": ["xtx-1"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "xtx_2", "host": "host_d", "gpus": ["xtx-2"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "xtx_3", "host": "host_d", "gpus": ["xtx-3"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "four_e", "host": "host_e", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]}],
  "decoders": [
    {"name": "t10dec", "host": "host_e", "gpu": "t10-4", "backend": "sim", "profile": "t10"}],
  "encoders": [
    {"name": "encoder_d", "host": "host_d", "gpus": ["xtx-0"], "backend": "sim", "profile": "rx7900xtx"},
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
  std::shared_ptr<dispatching::profile_estimates> est;
  sched::state state;
};

setup make_setup(const std::string& name, const char* json,
                 const std::map<std::string, std::string>& policies = {}) {
  setup s;
  s.name = name;
  s.cluster = config::parse(json, "");
  s.est = std::make_shared<dispatching::profile_estimates>(s.cluster,
                                                       profiles::profile::reference());
  s.state = dispatching::initial_state(s.cluster, 1.0);
  dispatching::configure(s.state, s.cluster, s.est, policies);
  return s;
}

/// The same cluster without one decoder.
setup without_decoder(const setup& from, const std::string& decoder) {
  setup s;
  s.name = from.name + " without " + decoder;
  s.cluster = from.cluster;
  auto& ds = s.cluster.decoders;
  ds.erase(std::remove_if(ds.begin(), ds.end(),
                          [&](const config::decoder& d) { return d.name == decoder; }),
           ds.end());
  s.est = std::make_shared<dispatching::profile_estimates>(s.cluster,
                                                       profiles::profile::reference());
  s.state = dispatching::initial_state(s.cluster, 1.0);
  dispatching::configure(s.state, s.cluster, s.est);
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
  profiles::job_size size{w, h, secs};
  std::vector<std::string> pools;
  for (auto& p : s.cluster.pools)
    if (prof.fits(p.profile_key, size))
      pools.push_back(p.name);
  auto rate = [&](const std::string& name) {
    auto& pv = s.state.pools.at(name);
    return 1 / prof.sampling(pv.kind, size, profiles::model_state::warm).s;
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
  profiles::job_size size{w, h, secs};
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
    double cold = prof.sampling(p.profile_key, size, profiles::model_state::cold).s;
    double warm = prof.sampling(p.profile_key, size, profiles::model_state::warm).s;
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


// -- 3. the best schedule in the model, by exhaustive search --------------------------------

/// A dispatch policy that replays a path of choices and records the choices it was offered
/// after the path's end (taking the first), so that a depth-first search can enumerate every
/// schedule the line allows, each with line_sim (the scheduler's, pools' and decoders'
/// machines, unchanged).
///
/// At each dispatch decision it offers: the lowest queued job (the run's jobs are alike) to
/// each free pool that may take it, or to none (the free pools idle until the next event).
/// Permutations are cut: pools declined or passed over at one instant are not offered again
/// at that instant. Decoders: when the mode has more than one, each decoder that can take
/// the latent now, or none (wait) when some decoder cannot take it now; with one decoder, earliest-sampled-first without idling is optimal for
/// identical decodes and is not branched on. A branch whose lower bound reaches the best
/// makespan found is cut (pruned: no more choices recorded, its end ignored).
class search_policy : public sched::dispatch_policy {
public:
  search_policy(std::vector<int> path, double incumbent, double min_sample_s,
                double min_tail_s, double decode_rate, std::size_t decoders)
      : path_(std::move(path)), incumbent_(incumbent), min_sample_s_(min_sample_s),
        min_tail_s_(min_tail_s), decode_rate_(decode_rate), decoders_(decoders) {}
  const char* name() const override { return "search"; }

  std::optional<sched::assignment> next(const sched::dispatch_view& v) const override {
    if (pruned_ || v.queue.queued.empty())
      return std::nullopt;
    if (bound(v.r, v.now) >= incumbent_ - 1e-6) {
      pruned_ = true;
      return std::nullopt;
    }
    if (v.now != declined_at_) {
      declined_at_ = v.now;
      declined_.clear();
    }
    const auto& head = v.r.jobs[*v.queue.queued.begin()];
    std::vector<uint32_t> offer;
    for (uint32_t id : v.free)
      if (!declined_.count(id) && sched::pool_may_take(v.pool(id), head))
        offer.push_back(id);
    if (offer.empty())
      return std::nullopt;
    int c = choose(offer.size() + 1);
    if (c == static_cast<int>(offer.size())) {  // none: these pools idle until later
      declined_.insert(offer.begin(), offer.end());
      return std::nullopt;
    }
    for (int k = 0; k < c; ++k)  // passed over: taking them after this one is a permutation
      declined_.insert(offer[static_cast<std::size_t>(k)]);
    return sched::assignment{*v.queue.queued.begin(), offer[static_cast<std::size_t>(c)]};
  }

  sched::decoder_view* pick_decoder(const sched::state& s, const sched::run& r,
                                    const sched::job& j,
                                    const std::vector<sched::decoder_view*>& decoders,
                                    double now) const override {
    if (decoders_ <= 1 || pruned_)
      return dispatch_policy::pick_decoder(s, r, j, decoders, now);
    // Each decoder that can take it now, or none: waiting for one that cannot (a send now
    // dominates a send later to the same decoder, so waiting is offered only then).
    std::vector<sched::decoder_view*> offer;
    bool some_cannot = false;
    for (auto* d : decoders) {
      if (!d->alive)
        continue;
      if (d->credits() > 0 && !sched::decoder_blocked(s, *d))
        offer.push_back(d);
      else
        some_cannot = true;
    }
    if (offer.empty())
      return nullptr;
    int c = choose(offer.size() + (some_cannot ? 1 : 0));
    return c == static_cast<int>(offer.size()) ? nullptr : offer[static_cast<std::size_t>(c)];
  }

  /// The choices made (the path, then the first option at each later decision).
  std::vector<int> taken;
  /// The number of options at each decision of `taken`.
  std::vector<int> arity;

private:
  int choose(std::size_t options) const {
    std::size_t k = taken.size();
    int c = k < path_.size() ? path_[k] : 0;
    const_cast<search_policy*>(this)->taken.push_back(c);
    const_cast<search_policy*>(this)->arity.push_back(static_cast<int>(options));
    return c;
  }

  /// No schedule from here ends sooner: a queued job still needs sampling (at least the
  /// fastest warm time) and a handoff and decode; and every job not yet decoding needs a
  /// decode, at most at the decoders' summed rate.
  double bound(const sched::run& r, double now) const {
    std::size_t queued = 0, undecoded = 0;
    for (auto& j : r.jobs) {
      if (j.state == sched::job_state::queued)
        ++queued;
      if (j.state == sched::job_state::queued || j.state == sched::job_state::sampling
          || j.state == sched::job_state::sampled)
        ++undecoded;
    }
    double b = now;
    if (queued > 0)
      b = std::max(b, now + min_sample_s_ + min_tail_s_);
    if (undecoded > 0)
      b = std::max(b, now + static_cast<double>(undecoded) / decode_rate_);
    return b;
  }

  std::vector<int> path_;
  double incumbent_;
  double min_sample_s_, min_tail_s_, decode_rate_;
  std::size_t decoders_;
  mutable bool pruned_ = false;
  mutable double declined_at_ = -1;
  mutable std::set<uint32_t> declined_;
};

struct search_result {
  double best = 1e300;             ///< the best makespan of any schedule (1e300: none)
  std::map<std::string, int> jobs_per_pool;  ///< of the best schedule
  uint64_t schedules = 0;          ///< line_sim runs (one per leaf of the search tree)
  uint64_t pruned = 0;
  bool complete = true;            ///< the whole tree was searched (no node limit hit)
};

/// Every schedule of `count` jobs of one size on every pool and decoder of the cluster
/// (mode auto's resources), searched depth first with line_sim.
search_result best_schedule(const setup& c, uint32_t w, uint32_t h, uint32_t secs,
                            uint32_t count, uint64_t max_schedules) {
  search_result out;
  const auto& prof = c.est->profile();
  profiles::job_size size{w, h, secs};
  msg::job_spec spec;
  spec.width = w;
  spec.height = h;
  spec.seconds = secs;
  double min_sample = 1e300, min_tail = 1e300, decode_rate = 0;
  for (auto& p : c.cluster.pools)
    if (prof.fits(p.profile_key, size))
      min_sample = std::min(min_sample,
                            prof.sampling(p.profile_key, size, profiles::model_state::warm).s);
  for (auto& [name, d] : c.state.decoders) {
    decode_rate += 1 / c.est->decode(d, spec);
    for (auto& p : c.cluster.pools)
      min_tail = std::min(min_tail, c.est->handoff(p.host, d, spec) + c.est->decode(d, spec));
  }
  std::vector<std::vector<int>> stack{{}};
  while (!stack.empty()) {
    if (out.schedules >= max_schedules) {
      out.complete = false;
      break;
    }
    auto path = std::move(stack.back());
    stack.pop_back();
    auto s = c.state;
    auto pol = std::make_shared<search_policy>(path, out.best, min_sample, min_tail,
                                               decode_rate, c.state.decoders.size());
    s.mode_policy[dispatching::auto_mode] = pol;
    sched::run r;
    r.id = "search";
    r.mode = dispatching::auto_mode;
    for (uint32_t i = 0; i < count; ++i) {
      sched::job j;
      j.spec = msg::job_spec{r.id, i, 987654321123ull + i, w, h, secs, "p", "p-sha", ""};
      r.jobs.push_back(std::move(j));
    }
    double limit = out.best < 1e300 ? out.best : 1e12;
    auto res = planner::simulate(s, std::move(r), planner::line_timing(*c.est), {}, limit);
    ++out.schedules;
    auto sum = sched::summarize(res.run);
    if (res.finished && sum.succeeded == count && sum.makespan_s < out.best - 1e-6) {
      out.best = sum.makespan_s;
      out.jobs_per_pool.clear();
      for (auto& j : res.run.jobs)
        ++out.jobs_per_pool[j.pool];
    }
    // Siblings of every decision taken after the replayed path.
    for (std::size_t k = path.size(); k < pol->arity.size(); ++k)
      for (int alt = pol->arity[k] - 1; alt >= 1; --alt) {
        std::vector<int> child(pol->taken.begin(), pol->taken.begin() + static_cast<long>(k));
        child.push_back(alt);
        stack.push_back(std::move(child));
      }
  }
  return out;
}


// -- 4. a production shot list ---------------------------------------------------------------

/// Maximises c.x subject to A x <= b, x >= 0, with b >= 0 (the origin feasible): a dense
/// simplex with Bland's rule (no cycling). Returns the optimum.
double simplex_max(std::vector<std::vector<double>> A, std::vector<double> b,
                   const std::vector<double>& c) {
  const std::size_t m = A.size(), n = c.size();
  // Tableau: m rows of [A | I | b], objective row [-c | 0 | 0].
  std::vector<std::vector<double>> t(m + 1, std::vector<double>(n + m + 1, 0));
  std::vector<std::size_t> basis(m);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j)
      t[i][j] = A[i][j];
    t[i][n + i] = 1;
    t[i][n + m] = b[i];
    basis[i] = n + i;
  }
  for (std::size_t j = 0; j < n; ++j)
    t[m][j] = -c[j];
  while (true) {
    std::size_t col = n + m;
    for (std::size_t j = 0; j < n + m; ++j)
      if (t[m][j] < -1e-12) {
        col = j;
        break;
      }
    if (col == n + m)
      return t[m][n + m];
    std::size_t row = m;
    double best = 0;
    for (std::size_t i = 0; i < m; ++i)
      if (t[i][col] > 1e-12) {
        double r = t[i][n + m] / t[i][col];
        if (row == m || r < best - 1e-12 || (std::abs(r - best) <= 1e-12 && basis[i] < basis[row])) {
          row = i;
          best = r;
        }
      }
    if (row == m)
      return 1e300;  // unbounded
    double pv = t[row][col];
    for (auto& v : t[row])
      v /= pv;
    for (std::size_t i = 0; i <= m; ++i)
      if (i != row && t[i][col] != 0) {
        double f = t[i][col];
        for (std::size_t j = 0; j <= n + m; ++j)
          t[i][j] -= f * t[row][j];
      }
    basis[row] = col;
  }
}

/// The steady-state upper bound (clips per second) of a cluster for a mix of sizes (`share`
/// of each, summing to 1), as a linear program: the line time-shares its layouts (sets of
/// pools that run together: lambda_L of the time each, summed at most 1); pool p spends
/// x_pc of the time sampling size c warm (summed at most the time its layouts run), giving
/// x_pc / warm_pc clips of c a second; every decoder likewise, y_dc of its time on c at
/// decode_dc each (all decoders at once, a GPU shared with a pool or not: an over-estimate,
/// so still a bound). The throughput X needs share_c X clips of each size a second from
/// both. Conditioning, cold starts, handoffs and every ramp are left out: no schedule does
/// better.
double mix_upper_bound(const setup& s, const std::vector<std::array<uint32_t, 3>>& sizes,
                       const std::vector<double>& share) {
  const auto& prof = s.est->profile();
  std::vector<std::string> pools;
  for (auto& p : s.cluster.pools)
    pools.push_back(p.name);
  const std::size_t P = pools.size(), C = sizes.size(), D = s.cluster.decoders.size();
  std::vector<uint32_t> layouts;
  for (uint32_t mask = 1; mask < (1u << P); ++mask) {
    bool ok = true;
    for (std::size_t a = 0; a < P && ok; ++a)
      for (std::size_t b = a + 1; b < P && ok; ++b)
        if ((mask >> a & 1) && (mask >> b & 1) && s.state.pools.at(pools[a]).conflicts.count(pools[b]))
          ok = false;
    if (ok)
      layouts.push_back(mask);
  }
  const std::size_t L = layouts.size();
  // Variables: lambda (L), x (P x C), y (D x C), X.
  const std::size_t nx = L, ny = nx + P * C, nX = ny + D * C, n = nX + 1;
  std::vector<std::vector<double>> A;
  std::vector<double> b;
  auto row = [&] { A.emplace_back(n, 0.0); b.push_back(0); return A.size() - 1; };
  auto r0 = row();
  for (std::size_t l = 0; l < L; ++l)
    A[r0][l] = 1;
  b[r0] = 1;
  for (std::size_t p = 0; p < P; ++p) {
    auto r = row();
    for (std::size_t c = 0; c < C; ++c)
      A[r][nx + p * C + c] = 1;
    for (std::size_t l = 0; l < L; ++l)
      if (layouts[l] >> p & 1)
        A[r][l] = -1;
  }
  for (std::size_t d = 0; d < D; ++d) {
    auto r = row();
    for (std::size_t c = 0; c < C; ++c)
      A[r][ny + d * C + c] = 1;
    b[r] = 1;
  }
  for (std::size_t c = 0; c < C; ++c) {
    profiles::job_size size{sizes[c][0], sizes[c][1], sizes[c][2]};
    auto made = row(), decoded = row();
    A[made][nX] = share[c];
    A[decoded][nX] = share[c];
    for (std::size_t p = 0; p < P; ++p) {
      const auto& key = s.state.pools.at(pools[p]).kind;
      if (prof.fits(key, size))
        A[made][nx + p * C + c] = -1 / prof.sampling(key, size, profiles::model_state::warm).s;
    }
    for (std::size_t d = 0; d < D; ++d)
      A[decoded][ny + d * C + c] = -1 / prof.decode(s.cluster.decoders[d].profile_key, size).s;
  }
  std::vector<double> obj(n, 0);
  obj[nX] = 1;
  return simplex_max(A, b, obj);
}

std::string fmt3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

int run_bench(int argc, char** argv) {
  // `bench_plan --search [MAX_COUNT]`: only auto against the best schedule of the model, by
  // exhaustive search, on the reference cluster, every measured size, counts 1..MAX_COUNT
  // (default 6; the search grows fast with the count: 8 jobs of 736x1280x5 take 78,441
  // schedules).
  if (argc > 1 && std::string(argv[1]) == "--search") {
    uint32_t max_count = argc > 2 ? static_cast<uint32_t>(std::stoul(argv[2])) : 6;
    auto refc = make_setup("reference", embedded::reference_config);
    std::printf("auto against every schedule the model allows (reference cluster, mode auto's "
                "pools and decoders):\n%-14s %5s | %10s %10s %8s | %9s %s\n", "size", "count",
                "optimum", "auto", "behind", "schedules", "optimal split");
    for (auto& z : std::vector<std::array<uint32_t, 3>>{
           {416, 736, 5}, {736, 1280, 5}, {544, 960, 15}, {736, 1280, 10}})
      for (uint32_t n = 1; n <= max_count; ++n) {
        auto a = plan(refc, dispatching::auto_mode, z[0], z[1], z[2], n);
        auto opt = best_schedule(refc, z[0], z[1], z[2], n, 5'000'000);
        std::string split;
        for (auto& [pool, k] : opt.jobs_per_pool)
          split += (split.empty() ? "" : ", ") + pool + " " + std::to_string(k);
        char size_text[32];
        std::snprintf(size_text, sizeof(size_text), "%ux%ux%u", z[0], z[1], z[2]);
        std::printf("%-14s %5u | %10.3f %10.3f %+7.2f%% | %9llu %s%s\n", size_text, n, opt.best,
                    a.summary.makespan_s, 100 * (a.summary.makespan_s / opt.best - 1),
                    static_cast<unsigned long long>(opt.schedules), split.c_str(),
                    opt.complete ? "" : " (search incomplete)");
      }
    return 0;
  }
  // `bench_plan --quick` (launch/test): the grid's counts 1, 6 and 30 only and no exhaustive
  // search of the example, so the count-120 and search targets are not checked; everything
  // else as the full run (launch/bench plan).
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (argc > 1 && !quick) {
    std::fprintf(stderr, "usage: bench_plan [--quick | --search [MAX_COUNT]]\n");
    return 2;
  }
  std::printf("bench_plan: the planner against the reference line, and auto against every "
              "fixed mode%s\n\n", quick ? " (--quick: counts 1, 6 and 30, no search)" : "");

  // -- 1. the reference rows -----------------------------------------------------------------
  auto ref = make_setup("reference", embedded::reference_config);
  std::map<std::string, std::string> greedy;
  for (auto& m : ref.cluster.modes)
    greedy[m.name] = "first_free";
  auto ref_greedy = make_setup("reference", embedded::reference_config, greedy);
  std::printf("The reference's 6-job batches (docs/reference.md) planned on the embedded "
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
  const std::vector<uint32_t> counts =
    quick ? std::vector<uint32_t>{1, 6, 30} : std::vector<uint32_t>{1, 6, 30, 120};

  double worst_vs_fixed = -1e9;   // (auto / best fixed - 1) in %, the largest
  int cells = 0, worse_cells = 0, incomplete = 0;
  double worst_bound = 1e9, worst_whole = 1e9, worst_bound_120 = 1e9, worst_whole_120 = 1e9;
  double worst_steady = 1e9, worst_steady_120 = 1e9;
  double worst_first_to_last = 1e9, worst_first_to_last_120 = 1e9;
  std::string worst_steady_cell;
  std::printf("%-12s %-14s %5s | %-22s %9s | %9s %8s | %9s %7s %7s %7s | %9s %9s\n",
              "cluster", "size", "count", "best fixed mode", "makespan", "auto", "vs best",
              "UB clip/h", "whole", "1st-end", "steady", "bound s", "vs bound");
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
        auto a = plan(c, dispatching::auto_mode, sz[0], sz[1], sz[2], n);
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
        // Steady-state throughput, two ways, against UB:
        // - first_to_last: (count - 1) clips over (last finish - first finish): the time
        //   before the first video is left out, the other pools' ramps are not;
        // - steady: the clips finished after the line is full, over the time from then to
        //   the last finish. The line is full at R, when every pool that takes part in the
        //   batch has written its first video (its ramp: conditioning, cold model, first
        //   decode, is over).
        std::vector<double> ends;
        std::map<std::string, double> first_of_pool;
        for (auto& j : a.jobs)
          if (j.decode) {
            ends.push_back(j.decode->end);
            auto [it, fresh] = first_of_pool.emplace(j.pool, j.decode->end);
            if (!fresh)
              it->second = std::min(it->second, j.decode->end);
          }
        std::sort(ends.begin(), ends.end());
        double first_to_last =
          ends.size() > 1 && ends.back() > ends.front()
            ? static_cast<double>(ends.size() - 1) / (ends.back() - ends.front()) * 3600 / ub
            : 0;
        double full_at = 0;
        for (auto& [pool, t] : first_of_pool)
          full_at = std::max(full_at, t);
        auto after = static_cast<double>(
          ends.end() - std::upper_bound(ends.begin(), ends.end(), full_at + 1e-9));
        double steady = ends.back() > full_at ? after / (ends.back() - full_at) * 3600 / ub : 0;
        if (n >= 30) {
          worst_bound = std::min(worst_bound, vs_bound);
          worst_whole = std::min(worst_whole, whole);
          worst_first_to_last = std::min(worst_first_to_last, first_to_last);
          if (steady < worst_steady) {
            worst_steady = steady;
            worst_steady_cell = c.name + " " + size_text + " x" + std::to_string(n);
          }
        }
        if (n >= 120) {
          worst_bound_120 = std::min(worst_bound_120, vs_bound);
          worst_whole_120 = std::min(worst_whole_120, whole);
          worst_steady_120 = std::min(worst_steady_120, steady);
          worst_first_to_last_120 = std::min(worst_first_to_last_120, first_to_last);
        }
        std::printf("%-12s %-14s %5u | %-22s %9.1f | %9.1f %+7.2f%% | %9.2f %7.3f %7.3f %7.3f | %9.1f %9.3f\n",
                    c.name.c_str(), size_text, n, best_mode.c_str(),
                    best < 1e300 ? best : 0.0, a.summary.makespan_s, vs, ub, whole,
                    first_to_last, steady, bound, vs_bound);
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

  // -- 3. the issue's example against the best schedule the model allows ---------------------
  const auto& refc = clusters[0];
  auto example = plan(refc, dispatching::auto_mode, 736, 1280, 5, 6);
  auto t0 = std::chrono::steady_clock::now();
  // --quick: not searched (168,833 whole simulations, most of the bench's time).
  auto opt = quick ? search_result{} : best_schedule(refc, 736, 1280, 5, 6, 5'000'000);
  double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string split;
  for (auto& [pool, n] : opt.jobs_per_pool)
    split += (split.empty() ? "" : ", ") + pool + " " + std::to_string(n);
  // The same without the T10 decoder of host A (the model before it could decode on a
  // freed T10): the four fixed modes' resources only.
  auto no_t10 = without_decoder(refc, "t10_a");
  auto example_no_t10 = plan(no_t10, dispatching::auto_mode, 736, 1280, 5, 6);
  auto opt_no_t10 = best_schedule(no_t10, 736, 1280, 5, 6, 5'000'000);
  std::printf("Without decoder t10_a (a T10 of host A): best %.3f s (%s after %llu schedules), "
              "auto %.3f s.\n", opt_no_t10.best,
              opt_no_t10.complete ? "proved optimal" : "NOT complete",
              static_cast<unsigned long long>(opt_no_t10.schedules),
              example_no_t10.summary.makespan_s);
  if (quick)
    std::printf("The issue's example (reference cluster, 736x1280x5 x 6): auto %.3f s; the "
                "search of every schedule is left out (--quick).\n\n",
                example.summary.makespan_s);
  else
  std::printf("The issue's example (reference cluster, 736x1280x5 x 6), every schedule the "
              "model allows,\nsearched with line_sim: best makespan %.3f s (%s), %s after %llu "
              "schedules (%.1f s); auto %.3f s.\n\n",
              opt.best, split.c_str(), opt.complete ? "proved optimal" : "NOT complete",
              static_cast<unsigned long long>(opt.schedules), search_s, example.summary.makespan_s);

  // -- 4. the production shot list --------------------------------------------------------------
  const uint32_t shots_n = 64;
  auto shots = bench::episode(shots_n);
  std::map<std::array<uint32_t, 3>, uint32_t> mix;
  for (auto& sh : shots)
    ++mix[{sh.width, sh.height, sh.seconds}];
  std::vector<std::array<uint32_t, 3>> mix_sizes;
  std::vector<double> mix_share;
  std::printf("A production shot list: %u shots, distinct prompts and references, on "
              "the reference cluster:", shots_n);
  for (auto& [z, k] : mix) {
    mix_sizes.push_back(z);
    mix_share.push_back(static_cast<double>(k) / shots_n);
    std::printf(" %u x %ux%ux%u", k, z[0], z[1], z[2]);
  }
  std::printf("\n");
  planner::request sreq;
  sreq.shots = shots;
  double best_fixed = 1e300;
  std::string best_fixed_mode = "-";
  for (auto& m : refc.cluster.modes) {
    sreq.mode = m.name;
    auto p = planner::plan(refc.state, *refc.est, sreq);
    if (!p.refused.empty()) {
      std::printf("  %-24s refused: %s\n", m.name.c_str(), p.refused.c_str());
      continue;
    }
    bool ok = complete(p, shots_n);
    std::printf("  %-24s makespan %9.1f s %s\n", m.name.c_str(), p.summary.makespan_s,
                ok ? "" : "(did not finish)");
    if (ok && p.summary.makespan_s < best_fixed) {
      best_fixed = p.summary.makespan_s;
      best_fixed_mode = m.name;
    }
  }
  sreq.mode = dispatching::auto_mode;
  auto sa = planner::plan(refc.state, *refc.est, sreq);
  const bool sa_ok = complete(sa, shots_n);
  std::vector<double> sends;
  std::map<std::string, double> sfirst;
  for (auto& j : sa.jobs)
    if (j.decode) {
      sends.push_back(j.decode->end);
      auto [it, fresh] = sfirst.emplace(j.pool, j.decode->end);
      if (!fresh)
        it->second = std::min(it->second, j.decode->end);
    }
  std::sort(sends.begin(), sends.end());
  double sfull = 0;
  for (auto& [pool, t] : sfirst)
    sfull = std::max(sfull, t);
  double sub = mix_upper_bound(refc, mix_sizes, mix_share);
  auto safter = static_cast<double>(
    sends.end() - std::upper_bound(sends.begin(), sends.end(), sfull + 1e-9));
  double s_steady = !sends.empty() && sends.back() > sfull ? safter / (sends.back() - sfull) : 0;
  double s_whole = sa_ok ? shots_n / sa.summary.makespan_s : 0;
  std::printf("  %-24s makespan %9.1f s %s\n", "auto", sa.summary.makespan_s,
              sa_ok ? "" : "(did not finish)");
  std::printf("Best fixed mode %s; auto / best fixed %.3f. Steady-state upper bound of the cluster "
              "for this mix (a linear program: layouts time-shared, each pool's time split over "
              "the sizes at warm sampling speed, every decoder at its decode speed; no "
              "conditioning, cold start, handoff or ramp): %.2f clips/hour. auto: %.2f clips/hour "
              "once every pool taking part has written its first video (to the last finish), "
              "%.2f over the whole makespan.\n\n",
              best_fixed_mode.c_str(), sa.summary.makespan_s / best_fixed, sub * 3600,
              s_steady * 3600, s_whole * 3600);

  for (auto& [row, err] : row_errors)
    std::printf("RESULT plan_error_%s %.1f %% target <=10\n", row.c_str(), std::abs(err));
  std::printf("RESULT plan_error_worst %.1f %% target <=10\n", worst_row);
  std::printf("RESULT auto_vs_best_fixed_worst %+.2f %% target <=0\n", worst_vs_fixed);
  std::printf("RESULT auto_cells_worse_than_best_fixed %d of %d target ==0\n", worse_cells,
              cells);
  std::printf("RESULT auto_cells_unfinished %d cells target ==0\n", incomplete);
  if (!quick) {
    std::printf("RESULT example_auto_vs_best_schedule %+.2f %% target <=0\n",
                100 * (example.summary.makespan_s / opt.best - 1));
    std::printf("RESULT example_search_complete %d bool target ==1\n", opt.complete ? 1 : 0);
  }
  std::printf("RESULT auto_count30plus_steady_throughput_vs_upper_bound_worst %.3f ratio target >=0.97\n",
              worst_steady);
  if (!quick)
    std::printf("RESULT auto_count120_steady_throughput_vs_upper_bound_worst %.3f ratio target >=0.97\n",
                worst_steady_120);
  auto at_120 = [&](double v) { return quick ? std::string("-") : fmt3(v); };
  std::printf("\nFigures without a target (the worst count >= 30 cell; count 120):\n");
  std::printf("  first_to_last throughput / UB        %.3f  %s\n", worst_first_to_last,
              at_120(worst_first_to_last_120).c_str());
  std::printf("  ramp-aware makespan bound / makespan  %.3f  %s\n", worst_bound,
              at_120(worst_bound_120).c_str());
  std::printf("  whole-run clips/hour / UB             %.3f  %s\n", worst_whole,
              at_120(worst_whole_120).c_str());
  std::printf("  worst steady cell: %s\n", worst_steady_cell.c_str());
  std::printf("RESULT shots_auto_vs_best_fixed_makespan %.3f ratio target <=0.9\n",
              sa.summary.makespan_s / best_fixed);
  std::printf("RESULT shots_auto_steady_throughput_vs_upper_bound %.3f ratio target >=0.9\n",
              s_steady / sub);
  std::printf("RESULT shots_auto_whole_run_throughput_vs_upper_bound %.3f ratio (no target)\n",
              s_whole / sub);
  bool ok = sa_ok && sa.summary.makespan_s / best_fixed <= 0.9 && s_steady / sub >= 0.9
            && worst_row <= 10 && worse_cells == 0 && incomplete == 0 && worst_steady >= 0.97
            && (quick || (worst_steady_120 >= 0.97 && opt.complete
                          && example.summary.makespan_s <= opt.best + 1e-6));
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plan: %s\n", e.what());
    return 2;
  }
}
