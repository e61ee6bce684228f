// Retry backoff (found by the 10-hour soak): a stage that failed transiently is
// not ordered again before now + a backoff that doubles per failure in a row, so a disk
// full for a second or two no longer spends every attempt of the jobs sampled meanwhile;
// the pool takes other jobs meanwhile and the job is ordered once its backoff is over.
#include <catch2/catch.hpp>

#include <functional>

#include "actors/coordinator/scheduler.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::run_of;

namespace {

/// sched_fixtures::line_of(n) with max_attempts 8 (the soak's), backoff 1 s doubling, at
/// most 60 s.
actors::coordinator::state backoff_line(std::size_t n) {
  auto s = sched_fixtures::line_of(n);
  s.p.max_attempts = 8;
  s.p.retry_backoff_s = 1;
  s.p.retry_backoff_max_s = 60;
  return s;
}

void pools_idle(actors::coordinator::state& s, uint64_t seq, double now) {
  for (auto& [name, p] : std::map<std::string, actors::coordinator::pool_view>(s.pools)) {
    msg::pool_status st;
    st.pool = name;
    st.host = "a";
    st.epoch = 7;
    st.seq = seq;
    actors::coordinator::step(s, actors::coordinator::ev_pool_status{st}, now);
  }
}

std::vector<msg::sample_order> sample_orders(const std::vector<actors::coordinator::effect>& fx) {
  std::vector<msg::sample_order> out;
  for (auto& e : fx)
    if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
      out.push_back(o->order);
  return out;
}

std::vector<msg::decode_order> decode_orders(const std::vector<actors::coordinator::effect>& fx) {
  std::vector<msg::decode_order> out;
  for (auto& e : fx)
    if (auto* o = std::get_if<actors::coordinator::fx_send_decode>(&e))
      out.push_back(o->order);
  return out;
}

msg::sample_result sampled(const msg::sample_order& o, bool ok) {
  msg::sample_result r;
  r.pool = o.pool;
  r.host = "a";
  r.attempt = o.attempt;
  r.run_id = o.job.run_id;
  r.index = o.job.index;
  if (ok) {
    r.outcome = msg::outcome::ok;
    r.latent_sha256 = std::string(64, 'a' + static_cast<char>(o.job.index % 26));
    r.latent_bytes = 1000;
  } else {
    r.outcome = msg::outcome::transient;
    r.error = "sim sampler: cannot write work/latent.tmp: No space left on device";
  }
  return r;
}

/// Drives the line from `from` to `to` in ticks of `dt` (the live coordinator ticks every
/// status interval); each sample order is answered at once, transient while
/// `disk_full(now)`, else ok. Returns when each order went out: (time, job index).
std::vector<std::pair<double, uint32_t>> drive(actors::coordinator::state& s, double from, double to,
                                               double dt, const std::function<bool(double)>& full,
                                               std::vector<actors::coordinator::effect> pending = {}) {
  std::vector<std::pair<double, uint32_t>> sent;
  for (int k = 0; from + k * dt <= to + 1e-9; ++k) {
    const double now = from + k * dt;
    auto fx = pending.empty() ? actors::coordinator::step(s, actors::coordinator::ev_tick{}, now) : std::move(pending);
    pending.clear();
    // Answer orders within the same instant (a backend that fails at once).
    for (auto orders = sample_orders(fx); !orders.empty();) {
      std::vector<msg::sample_order> next;
      for (auto& o : orders) {
        sent.emplace_back(now, o.job.index);
        auto f = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sampled(o, !full(now))}, now);
        for (auto& n : sample_orders(f))
          next.push_back(n);
      }
      orders = std::move(next);
    }
    REQUIRE(actors::coordinator::check_index(s).empty());
  }
  return sent;
}

} // namespace

TEST_CASE("backoff: a disk full for 1.5 s no longer spends every sampling attempt") {
  auto s = backoff_line(1);
  pools_idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  REQUIRE(sample_orders(fx).size() == 1);
  auto full = [](double t) { return t < 1.5; };
  auto sent = drive(s, 0, 20, 0.1, full, fx);
  auto* j = s.find_job("r", 0);
  // Without a backoff the 8 attempts all went out and failed at t = 0.
  CHECK(j->state == actors::coordinator::job_state::sampled);
  CHECK(j->sample_attempts == 3);
  REQUIRE(sent.size() == 3);
  // Ordered at 0, again after 1 s (still full), again after 2 s more.
  CHECK(sent[0].first == Approx(0));
  CHECK(sent[1].first == Approx(1.0).margin(0.11));
  CHECK(sent[2].first == Approx(3.0).margin(0.21));
  CHECK(j->retry_streak == 0);  // its stage went through
  CHECK(j->retry_at < 0);
  CHECK_FALSE(actors::coordinator::next_retry(s).has_value());
}

TEST_CASE("backoff: it doubles up to its ceiling, and a job that keeps failing still ends") {
  auto s = backoff_line(1);
  s.p.max_attempts = 6;
  s.p.retry_backoff_max_s = 3;
  pools_idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  auto sent = drive(s, 0, 40, 0.25, [](double) { return true; }, fx);
  REQUIRE(sent.size() == 6);
  std::vector<double> gaps;
  for (std::size_t k = 1; k < sent.size(); ++k)
    gaps.push_back(sent[k].first - sent[k - 1].first);
  // 1, 2, then the ceiling of 3 s (at the next tick after it).
  CHECK(gaps[0] == Approx(1));
  CHECK(gaps[1] == Approx(2));
  CHECK(gaps[2] == Approx(3));
  CHECK(gaps[3] == Approx(3));
  CHECK(gaps[4] == Approx(3));
  auto* j = s.find_job("r", 0);
  CHECK(j->state == actors::coordinator::job_state::failed);  // not idle for ever: attempts spent
  CHECK(j->sample_attempts == 6);
  CHECK(s.find_run("r")->done);
}

TEST_CASE("backoff: the idle pool takes other jobs meanwhile, the job comes back after it") {
  auto s = backoff_line(1);
  pools_idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 3)}, 0);
  auto o = sample_orders(fx);
  REQUIRE(o.size() == 1);
  REQUIRE(o[0].job.index == 0);
  // Job 0 fails: the pool gets job 1 in the same step, not job 0 again.
  fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sampled(o[0], false)}, 0.1);
  o = sample_orders(fx);
  REQUIRE(o.size() == 1);
  CHECK(o[0].job.index == 1);
  auto* j0 = s.find_job("r", 0);
  CHECK(j0->state == actors::coordinator::job_state::queued);
  CHECK(j0->retry_at == Approx(1.1));
  REQUIRE(actors::coordinator::next_retry(s).has_value());
  CHECK(*actors::coordinator::next_retry(s) == Approx(1.1));
  CHECK(actors::coordinator::check_index(s).empty());
  // Job 1 done at 0.3: job 2 (not job 0, still waiting) goes next.
  fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sampled(o[0], true)}, 0.3);
  o = sample_orders(fx);
  REQUIRE(o.size() == 1);
  CHECK(o[0].job.index == 2);
  // Job 2 done at 0.5: the pool is idle, job 0 still waits.
  fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sampled(o[0], true)}, 0.5);
  CHECK(sample_orders(fx).empty());
  CHECK(s.pool_free("p0"));
  // The first step after its backoff orders it.
  CHECK(sample_orders(actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1.0)).empty());
  fx = actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1.1);
  o = sample_orders(fx);
  REQUIRE(o.size() == 1);
  CHECK(o[0].job.index == 0);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("backoff: a decode that failed waits too, and its latent is kept meanwhile") {
  auto s = backoff_line(1);
  pools_idle(s, 1, 0);
  msg::decoder_status ds;
  ds.decoder = "dec";
  ds.host = "b";
  ds.epoch = 3;
  ds.seq = 1;
  ds.capacity = 2;
  ds.credits = 2;
  actors::coordinator::step(s, actors::coordinator::ev_decoder_status{ds}, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  auto so = sample_orders(fx);
  REQUIRE(so.size() == 1);
  fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sampled(so[0], true)}, 0.2);
  auto d = decode_orders(fx);
  REQUIRE(d.size() == 1);
  msg::decode_result r;
  r.decoder = "dec";
  r.host = "b";
  r.attempt = d[0].attempt;
  r.run_id = "r";
  r.index = 0;
  r.outcome = msg::outcome::transient;
  r.stage = "decode";
  r.error = "cannot write the video: No space left on device";
  fx = actors::coordinator::step(s, actors::coordinator::ev_decode_result{r}, 0.4);
  CHECK(decode_orders(fx).empty());
  auto* j = s.find_job("r", 0);
  CHECK(j->state == actors::coordinator::job_state::sampled);
  CHECK(j->retry_at == Approx(1.4));
  CHECK(actors::coordinator::check_index(s).empty());
  // Its host reports the latent: it is needed (not released) while the job waits.
  msg::latent_holdings h;
  h.host = "a";
  h.epoch = 1;
  h.seq = 1;
  h.latents.push_back({j->latent_sha256, 1000, "r", 0});
  fx = actors::coordinator::step(s, actors::coordinator::ev_latent_holdings{h}, 0.5);
  for (auto& e : fx)
    CHECK_FALSE(std::holds_alternative<actors::coordinator::fx_release>(e));
  fx = actors::coordinator::step(s, actors::coordinator::ev_tick{}, 1.4);
  d = decode_orders(fx);
  REQUIRE(d.size() == 1);
  CHECK(d[0].job.index == 0);
}

TEST_CASE("backoff: 0 retries at once (the old behaviour), lost attempts are not held back") {
  auto s = backoff_line(1);
  s.p.retry_backoff_s = 0;
  pools_idle(s, 1, 0);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_submit{run_of("r", 1)}, 0);
  auto o = sample_orders(fx);
  REQUIRE(o.size() == 1);
  fx = actors::coordinator::step(s, actors::coordinator::ev_sample_result{sampled(o[0], false)}, 0.1);
  CHECK(sample_orders(fx).size() == 1);
  CHECK_FALSE(actors::coordinator::next_retry(s).has_value());
}
