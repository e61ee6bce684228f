// Retention, re-offer and the latent budget as state machines: the host's latent store
// (actors/latents/store_machine) and the coordinator's answer to its reports (scheduler).
#include <catch2/catch.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "actors/latents/store_machine.hpp"
#include "tests/support/effects.hpp"

using namespace vidline;
using testing_support::all_of;

namespace {

const std::string sha_a(64, 'a');
const std::string sha_b(64, 'b');
const std::string sha_c(64, 'c');
const std::string sha_d(64, 'd');

actors::latents::state store(uint64_t budget, double retention) {
  actors::latents::state s;
  s.host = "a";
  s.budget_bytes = budget;
  s.retention_s = retention;
  return s;
}

} // namespace

TEST_CASE("store: a latent is reported until released, removed after its retention") {
  auto s = store(0, 5);
  auto fx = actors::latents::step(s, actors::latents::ev_scan{{{sha_a, {100, "r1", 0}}, {sha_b, {50, "", 0}}}}, 0);
  auto reports = all_of<actors::latents::fx_report>(fx);
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].h.latents.size() == 2);
  CHECK(reports[0].h.bytes == 150);

  fx = actors::latents::step(s, actors::latents::ev_release{{sha_a}}, 1);
  CHECK(all_of<actors::latents::fx_remove>(fx).empty());  // retained for 5 s
  fx = actors::latents::step(s, actors::latents::ev_scan{{{sha_a, {100, "r1", 0}}, {sha_b, {50, "", 0}}}}, 2);
  REQUIRE(all_of<actors::latents::fx_report>(fx)[0].h.latents.size() == 1);  // released: not reported
  CHECK(all_of<actors::latents::fx_report>(fx)[0].h.bytes == 150);            // but still counted
  CHECK(all_of<actors::latents::fx_remove>(fx).empty());
  fx = actors::latents::step(s, actors::latents::ev_scan{{{sha_a, {100, "r1", 0}}, {sha_b, {50, "", 0}}}}, 6);
  auto removed = all_of<actors::latents::fx_remove>(fx);
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].sha256 == sha_a);
  CHECK(s.bytes() == 50);
}

TEST_CASE("store: retention 0 removes a released latent at once, unknown releases are ignored") {
  auto s = store(0, 0);
  actors::latents::step(s, actors::latents::ev_scan{{{sha_a, {100, "r1", 0}}}}, 0);
  auto fx = actors::latents::step(s, actors::latents::ev_release{{sha_a, sha_c}}, 1);
  auto removed = all_of<actors::latents::fx_remove>(fx);
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].sha256 == sha_a);
}

TEST_CASE("store: at the budget the host stops accepting, and accepts again once it drains") {
  auto s = store(250, 0);
  auto fx = actors::latents::step(s, actors::latents::ev_scan{{{sha_a, {100, "r1", 0}}}}, 0);
  CHECK(all_of<actors::latents::fx_accepting>(fx).empty());  // no change: still accepting
  fx = actors::latents::step(s, actors::latents::ev_scan{{{sha_a, {100, "r1", 0}}, {sha_b, {150, "r1", 1}}}}, 1);
  auto acc = all_of<actors::latents::fx_accepting>(fx);
  REQUIRE(acc.size() == 1);
  CHECK_FALSE(acc[0].accepting);
  CHECK_FALSE(all_of<actors::latents::fx_report>(fx)[0].h.accepting);
  fx = actors::latents::step(s, actors::latents::ev_release{{sha_b}}, 2);
  acc = all_of<actors::latents::fx_accepting>(fx);
  REQUIRE(acc.size() == 1);
  CHECK(acc[0].accepting);
}

namespace {

/// One pool on host a, one decoder on host b, a run of `n` jobs submitted.
actors::coordinator::state line(uint32_t n) {
  actors::coordinator::state s;
  actors::coordinator::pool_view p;
  p.name = "a1";
  p.host = "a";
  p.kind = "k1";
  s.pools["a1"] = p;
  actors::coordinator::decoder_view d;
  d.name = "dec";
  d.host = "b";
  d.kind = "dk";
  s.decoders["dec"] = d;
  s.modes["m"] = {"a1"};
  s.mode_decoders["m"] = {"dec"};
  actors::coordinator::run r;
  r.id = "r1";
  r.mode = "m";
  for (uint32_t i = 0; i < n; ++i) {
    actors::coordinator::job j;
    j.spec = msg::job_spec{"r1", i, 100 + i, 416, 736, 5, "p", "sha-p", ""};
    r.jobs.push_back(j);
  }
  actors::coordinator::step(s, actors::coordinator::ev_submit{r}, 0);  // no pool reported yet: everything stays queued
  return s;
}

msg::latent_holdings holdings(const std::string& host, std::vector<msg::latent_held> l) {
  msg::latent_holdings h;
  h.host = host;
  h.epoch = 1;
  h.seq = 1;
  h.latents = std::move(l);
  return h;
}

std::vector<std::string> released(const std::vector<actors::coordinator::effect>& fx, const std::string& host) {
  std::vector<std::string> out;
  for (auto& e : fx)
    if (auto* r = std::get_if<actors::coordinator::fx_release>(&e))
      if (r->host == host)
        out.insert(out.end(), r->sha256s.begin(), r->sha256s.end());
  return out;
}

} // namespace

TEST_CASE("coordinator: a latent re-offered for a queued job is adopted, not sampled again") {
  auto s = line(2);
  auto* j = s.find_job("r1", 1);
  REQUIRE(j->state == actors::coordinator::job_state::queued);
  auto fx = actors::coordinator::step(s, actors::coordinator::ev_latent_holdings{holdings("a", {{sha_a, 1000, "r1", 1}})}, 1);
  CHECK(released(fx, "a").empty());
  CHECK(j->latent_sha256 == sha_a);
  CHECK(j->latent_host == "a");
  CHECK(j->latent_bytes == 1000);
  CHECK((j->state == actors::coordinator::job_state::sampled || j->state == actors::coordinator::job_state::decoding));
  CHECK(j->sample_attempts == 0);
  CHECK(actors::coordinator::check_index(s) == "");
}

TEST_CASE("coordinator: latents of decoded and unknown jobs are released, needed and failed ones kept") {
  auto s = line(3);
  auto* done = s.find_job("r1", 0);
  done->latent_sha256 = sha_a;
  done->latent_host = "a";
  auto* waiting = s.find_job("r1", 1);
  waiting->latent_sha256 = sha_b;
  waiting->latent_host = "a";
  waiting->sample_end = 1;
  auto* failed = s.find_job("r1", 2);
  failed->latent_sha256 = sha_d;
  failed->latent_host = "a";
  // Job 0 succeeded, job 1 waits for a decoder (sampled), job 2 failed.
  done->state = actors::coordinator::job_state::succeeded;
  waiting->state = actors::coordinator::job_state::sampled;
  failed->state = actors::coordinator::job_state::failed;
  s.hosts_up["a"] = false;  // so nothing dispatches job 1 meanwhile
  actors::coordinator::reindex(s);

  auto fx = actors::coordinator::step(
      s,
      actors::coordinator::ev_latent_holdings{holdings("a", {{sha_a, 10, "r1", 0},        // finished
                                               {sha_b, 10, "r1", 1},        // needed
                                               {sha_c, 10, "other-run", 0}, // unknown
                                               {sha_d, 10, "r1", 2}         // failed: resume
                                              })},
      2);
  // A run neither held nor journaled (once kept for ever) will never want it.
  CHECK(released(fx, "a") == std::vector<std::string>{sha_a, sha_c});
  // The decoder's received copy of job 0's latent goes too; of job 1's it stays, and so
  // does one no job names (it may be a result not reported yet).
  fx = actors::coordinator::step(s, actors::coordinator::ev_latent_holdings{holdings("b", {{sha_a, 10, "", 0},
                                                               {sha_b, 10, "", 0},
                                                               {sha_c, 10, "", 0}})}, 3);
  CHECK(released(fx, "b") == std::vector<std::string>{sha_a});
}
