// A deterministic simulation of the line's sampling side: the scheduler and two real pool
// machines on a virtual clock, messages delivered at once, a sampler of 30 steps over the
// reference shot's 442 s that saves a checkpoint every checkpoint_interval_s and crashes at
// a late step for some seeds. The job is resumed on a pool of the same kind from the newest
// checkpoint: the GPU time paid twice is at most one checkpoint interval (plus the step
// that was running), not the stage so far. Every failure prints its seed.

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"
#include "actors/pool/pool_machine.hpp"

using namespace vidline;

namespace {

constexpr double stage_s = 442;       // the reference's 10 s 736x1280 shot on 8 GPUs
constexpr uint32_t steps = 30;
constexpr double step_s = stage_s / steps;
constexpr uint32_t gpus = 8;

struct world {
  double interval;
  uint32_t crash_step;                // 0 = no crash
  std::string crash_pool;             // the pool whose first attempt crashes
  actors::coordinator::state s;
  std::map<std::string, actors::pool::state> pools;
  std::multimap<double, std::function<void()>> agenda;
  double now = 0;
  double sampled_s = 0;               // sampling seconds of every attempt, summed
  uint32_t crashes = 0;
  bool done = false;

  void at(double t, std::function<void()> f) { agenda.emplace(t, std::move(f)); }

  void coordinator(const actors::coordinator::event& e) {
    for (auto& fx : actors::coordinator::step(s, e, now, now)) {
      if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&fx))
        pool(o->order.pool, actors::pool::ev_order{o->order});
      else if (auto* g = std::get_if<actors::coordinator::fx_grant>(&fx))
        pool(g->grant.target, actors::pool::ev_grant{g->grant, now});
      else if (auto* a = std::get_if<actors::coordinator::fx_ack>(&fx))
        pool(a->target.substr(5), actors::pool::ev_ack{a->attempt});
    }
  }

  void report(const std::string& name) {
    coordinator(actors::coordinator::ev_pool_status{pools[name].status(now)});
  }

  void pool(const std::string& name, const actors::pool::event& e) {
    auto& p = pools[name];
    for (auto& fx : actors::pool::step(p, e, now)) {
      if (auto* c = std::get_if<actors::pool::fx_condition>(&fx)) {
        const uint64_t a = c->order.attempt;
        at(now, [this, name, a] { pool(name, actors::pool::ev_conditioned{a, true, "/c", 0, ""}); });
      } else if (auto* smp = std::get_if<actors::pool::fx_sample>(&fx)) {
        sample(name, smp->order);
      } else if (std::holds_alternative<actors::pool::fx_report>(fx)) {
        at(now, [this, name] { report(name); });
      }
    }
  }

  /// The sampler: the steps after the order's resume point, a checkpoint at the first step
  /// boundary `interval` after the last one, a crash at crash_step on the first attempt.
  void sample(const std::string& name, const msg::sample_order& o) {
    const double start = now;
    const uint32_t from = o.resume.step;
    const bool crash = crash_step > from && name == crash_pool && crashes == 0;
    double last = start;
    for (uint32_t k = from + 1; k <= steps; ++k) {
      const double t = start + (k - from) * step_s;
      if (crash && k == crash_step) {
        // Dies during step k: what it did since its last checkpoint is lost.
        const double died = t - step_s / 2;
        ++crashes;
        at(died, [this, name, o, start, died] {
          sampled_s += died - start;
          actors::pool::ev_sampled d;
          d.attempt = o.attempt;
          d.outcome = msg::outcome::transient;
          d.error = "worker crashed";
          pool(name, d);
        });
        return;
      }
      if (k < steps && t - last >= interval) {
        last = t;
        msg::checkpoint_ref c;
        c.step = k;
        c.steps = steps;
        c.sha256 = std::to_string(o.attempt) + "-" + std::to_string(k);
        c.bytes = 1;
        c.host = pools[name].host;
        c.made_unix_s = t;
        c.attempt = o.attempt;
        at(t, [this, name, a = o.attempt, c] { pool(name, actors::pool::ev_checkpoint{a, c}); });
      }
    }
    const double end = start + (steps - from) * step_s;
    at(end, [this, name, o, start, end] {
      sampled_s += end - start;
      actors::pool::ev_sampled d;
      d.attempt = o.attempt;
      d.outcome = msg::outcome::ok;
      d.sha256 = "latent";
      d.bytes = 1;
      d.staged = "";
      d.mono_s = now;
      pool(name, d);
      done = true;
    });
  }

  void run() {
    for (int guard = 0; !agenda.empty() && guard < 100000; ++guard) {
      auto it = agenda.begin();
      now = std::max(now, it->first);
      auto f = std::move(it->second);
      agenda.erase(it);
      f();
    }
  }
};

} // namespace

TEST_CASE("sim: a fault at a late step resumes from the newest checkpoint, GPU time paid "
          "twice is at most one checkpoint interval and a step") {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    world w;
    w.interval = std::uniform_real_distribution<double>(20, 120)(rng);
    w.crash_step = std::uniform_int_distribution<uint32_t>(0, steps - 1)(rng);
    w.crash_pool = "p0";
    for (auto [name, host] : {std::pair{"p0", "a"}, std::pair{"p1", "c"}}) {
      actors::coordinator::pool_view v;
      v.name = name;
      v.host = host;
      v.kind = "t10x8";
      v.gpus = gpus;
      w.s.pools[name] = v;
      w.s.modes["m"].push_back(name);
      actors::pool::state p;
      p.pool = name;
      p.host = host;
      p.epoch = 1;
      w.pools[name] = p;
    }
    w.s.p.retry_backoff_s = 0;
    w.s.p.lease_s = 1e9;  // the pools never go silent here
    w.s.p.checkpoint_interval_s = w.interval;
    w.report("p0");
    w.report("p1");
    actors::coordinator::run r;
    r.id = "r";
    r.mode = "m";
    actors::coordinator::job j;
    j.spec = msg::job_spec{"r", 0, 7, 736, 1280, 10, "p", "sha-p", ""};
    r.jobs.push_back(j);
    w.coordinator(actors::coordinator::ev_submit{r});
    w.run();
    INFO("seed " << seed << ": interval " << w.interval << " s, crash at step "
                 << w.crash_step);
    auto& job = *w.s.find_job("r", 0);
    REQUIRE(w.done);
    REQUIRE(job.state == actors::coordinator::job_state::sampled);
    if (w.crashes == 0) {
      CHECK(job.gpu_s_redone == 0);
      CHECK(w.sampled_s == Approx(stage_s));
      continue;
    }
    // Paid twice: from the newest checkpoint to the crash, never more than an interval and
    // the step that was running.
    CHECK(job.gpu_s_redone <= (w.interval + step_s) * gpus + 1e-6);
    CHECK(job.gpu_s_redone == Approx((w.sampled_s - stage_s) * gpus).margin(1e-6));
    CHECK((job.resumed_step > 0 || w.crash_step * step_s < w.interval + step_s));
    CHECK(job.checkpoints.empty());  // its latent made: released
  }
}
