// Stage times in the status come from the stages' own stamps: the coordinator's
// scheduler and a real decoder machine on virtual time, results reaching the coordinator
// late (as they do, with the next status report). Rebuilt from when results arrive, the
// decodes of one decoder overlapped; stamped, they never do, and `times` agrees with
// `stages` in the same reply.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/decoder/decoder_machine.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using nlohmann::json;

namespace {

/// Two pools on host a, one decoder (a real actors::decoder::state) on host b; results of the
/// decoder travel with its status reports, `report_delay` late.
struct line {
  actors::coordinator::state s;
  actors::decoder::state dec;
  double base = 0;  ///< when the virtual clock starts (unix seconds: run clock, time_scale 1)
  double t = 0;
  /// How late a report reaches the coordinator: alternately short and long, as a status
  /// interval and the network make it (a result waits for the next report).
  double report_delay(uint64_t seq) const { return seq % 2 ? 0.3 : 2.9; }
  std::multimap<double, std::function<void()>> q;  ///< (time, what happens then)
  std::set<uint64_t> sample_orders_seen;
  std::vector<double> sampling_s{10, 10.5, 9, 12, 8, 11};

  line() {
    for (auto* name : {"a1", "a2"}) {
      actors::coordinator::pool_view p;
      p.name = name;
      p.host = "a";
      p.kind = "k";
      s.pools[name] = p;
    }
    actors::coordinator::decoder_view d;
    d.name = "dec";
    d.host = "b";
    d.kind = "dk";
    s.decoders["dec"] = d;
    s.modes["m"] = {"a2", "a1"};  // configured order, not the names' order
    s.mode_decoders["m"] = {"dec"};
    s.p.lease_s = 1000;
    dec.decoder = "dec";
    dec.host = "b";
    dec.epoch = 7;
  }

  void at(double when, std::function<void()> f) { q.emplace(when, std::move(f)); }

  void sched_event(const actors::coordinator::event& e) {
    for (auto& fx : actors::coordinator::step(s, e, t)) {
      if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&fx)) {
        if (!sample_orders_seen.insert(o->order.attempt).second)
          continue;  // a resent order: the fake pool already runs it
        const auto order = o->order;
        const double start = t + 0.1, cond = 0.5;
        const double end = start + cond + sampling_s[order.job.index % sampling_s.size()];
        at(end + 0.2, [this, order, start, cond, end] {
          msg::sample_result r;
          r.pool = order.pool;
          r.host = "a";
          r.attempt = order.attempt;
          r.run_id = order.job.run_id;
          r.index = order.job.index;
          r.outcome = msg::outcome::ok;
          r.latent_sha256 = "l" + std::to_string(order.job.index);
          r.latent_bytes = 100;
          r.conditioning_s = cond;
          r.sampling_s = end - start - cond;
          r.start_unix_s = start;
          r.sampling_start_unix_s = start + cond;
          r.end_unix_s = end;
          sched_event(actors::coordinator::ev_sample_result{r});
          msg::pool_status st;
          st.pool = order.pool;
          st.host = "a";
          st.epoch = 1;
          st.seq = ++pool_seq;
          sched_event(actors::coordinator::ev_pool_status{st});
        });
      } else if (auto* o = std::get_if<actors::coordinator::fx_send_decode>(&fx)) {
        const auto order = o->order;
        at(t + 0.1, [this, order] { dec_event(actors::decoder::ev_order{order}); });
      } else if (auto* g = std::get_if<actors::coordinator::fx_grant>(&fx)) {
        if (g->target == "decoder:dec") {
          const auto grant = g->grant;
          at(t + 0.05, [this, grant] { dec_event(actors::decoder::ev_grant{grant, t}); });
        }
      } else if (auto* a = std::get_if<actors::coordinator::fx_ack>(&fx)) {
        if (a->target == "decoder:dec") {
          const auto ack = *a;
          at(t + 0.05, [this, ack] { dec_event(actors::decoder::ev_ack{ack.attempt, ack.discard}); });
        }
      }
    }
  }
  uint64_t pool_seq = 1;

  void dec_event(const actors::decoder::event& e) {
    for (auto& fx : actors::decoder::step(dec, e, t)) {
      if (auto* f = std::get_if<actors::decoder::fx_fetch>(&fx)) {
        const uint64_t a = f->order.attempt;
        at(t + 1.0, [this, a] { dec_event(actors::decoder::ev_fetched{a, msg::outcome::ok, ""}); });
      } else if (auto* d = std::get_if<actors::decoder::fx_decode>(&fx)) {
        const uint64_t a = d->order.attempt;
        const double took = 8 + 0.5 * (d->order.job.index % 3);
        at(t + took, [this, a, took] {
          dec_event(actors::decoder::ev_decoded{a, msg::outcome::ok, "", "/out/" + std::to_string(a),
                                         "sha", took, "", t});
        });
      } else if (std::holds_alternative<actors::decoder::fx_report>(fx)) {
        report();
      }
    }
  }

  void report() {
    auto st = dec.status(t);
    at(t + report_delay(st.seq), [this, st] { sched_event(actors::coordinator::ev_decoder_status{st}); });
  }

  /// Runs until `until` seconds after `base`.
  void run(double until) {
    until += base;
    while (!q.empty() && q.begin()->first <= until) {
      auto it = q.begin();
      t = it->first;
      auto f = std::move(it->second);
      q.erase(it);
      f();
    }
  }
};

actors::coordinator::run make_run(uint32_t count) { return sched_fixtures::run_of("r1", count); }

json status_of(line& l, double now) {
  REQUIRE_FALSE(l.s.runs.empty());
  return actors::coordinator::status_json(l.s, l.s.runs.back(), actors::coordinator::clock_note{false, 1.0}, now);
}

void start(line& l, uint32_t jobs) {
  l.t = l.base;
  for (auto* p : {"a1", "a2"}) {
    msg::pool_status st;
    st.pool = p;
    st.host = "a";
    st.epoch = 1;
    st.seq = 1;
    l.sched_event(actors::coordinator::ev_pool_status{st});
  }
  l.report();  // the decoder says it is there, with its credits
  l.run(0.5);
  l.sched_event(actors::coordinator::ev_submit{make_run(jobs)});
  // Periodic decoder reports (every second), as the actor sends them.
  for (double t = 1; t < 200; t += 1)
    l.at(l.base + t, [&l] { l.report(); });
}

} // namespace

TEST_CASE("status: decodes on one decoder never overlap, times agree with stages",
          "[status][stages]") {
  line l;
  start(l, 6);
  l.run(200);
  auto st = status_of(l, l.t);
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");

  std::vector<std::pair<double, double>> decodes;
  for (auto& j : st["jobs"]) {
    auto& sg = j["stages"];
    auto& tm = j["times"];
    for (const char* stage : {"sampling", "waiting", "handoff", "decode"})
      REQUIRE(sg[stage].is_object());
    // times.* is read off stages.*: the same numbers.
    CHECK(tm["decode_start_s"].get<double>() == sg["decode"]["start_s"].get<double>());
    CHECK(tm["decode_end_s"].get<double>() == sg["decode"]["end_s"].get<double>());
    CHECK(tm["sample_end_s"].get<double>() == sg["sampling"]["end_s"].get<double>());
    auto first = sg["conditioning"].is_object() ? sg["conditioning"] : sg["sampling"];
    CHECK(tm["sample_start_s"].get<double>() == first["start_s"].get<double>());
    auto len = [&](const char* s) {
      return sg[s].is_null() ? 0.0
                             : sg[s]["end_s"].get<double>() - sg[s]["start_s"].get<double>();
    };
    CHECK(tm["sampling_s"].get<double>() == Approx(len("sampling")).margin(1e-6));
    CHECK(tm["decode_s"].get<double>() == Approx(len("decode")).margin(1e-6));
    CHECK(tm["handoff_s"].get<double>() == Approx(len("handoff")).margin(1e-6));
    CHECK(tm["conditioning_s"].get<double>() == Approx(len("conditioning")).margin(1e-6));
    // The stages follow each other: sampling, waiting, handoff, pending, decode.
    CHECK(sg["waiting"]["start_s"] == sg["sampling"]["end_s"]);
    CHECK(sg["handoff"]["start_s"].get<double>() >= sg["waiting"]["end_s"].get<double>());
    CHECK(sg["decode"]["start_s"].get<double>() >= sg["handoff"]["end_s"].get<double>());
    if (sg["pending"].is_object()) {
      CHECK(sg["pending"]["start_s"] == sg["handoff"]["end_s"]);
      CHECK(sg["pending"]["end_s"] == sg["decode"]["start_s"]);
    }
    // The decode lasted what the decoder measured (8, 8.5 or 9 s), not arrival - decode_s.
    const double took = 8 + 0.5 * (j["index"].get<int>() % 3);
    CHECK(len("decode") == Approx(took).margin(1e-3));
    // Unix stamps are the same instants (time_scale 1, the run clock is unix time here).
    CHECK(sg["decode"]["end_unix"].get<double>() ==
          Approx(sg["decode"]["end_s"].get<double>() + st["clock"]["submitted_unix"].get<double>())
            .margin(2e-3));
    CHECK(j["failed_attempts"].empty());
    CHECK(j["running"].is_null());
    decodes.emplace_back(sg["decode"]["start_s"].get<double>(), sg["decode"]["end_s"].get<double>());
  }
  std::sort(decodes.begin(), decodes.end());
  for (std::size_t i = 1; i < decodes.size(); ++i) {
    INFO("decode " << i << " starts " << decodes[i].first << ", the one before ends "
                   << decodes[i - 1].second);
    CHECK(decodes[i].first >= decodes[i - 1].second - 1e-9);
  }
  // The pools kept waiting jobs: some latent waited for a decoder credit, and showed so
  // (not as a handoff of many seconds).
  double longest_wait = 0, longest_handoff = 0;
  for (auto& j : st["jobs"]) {
    auto& sg = j["stages"];
    longest_wait = std::max(longest_wait, sg["waiting"]["end_s"].get<double>()
                                            - sg["waiting"]["start_s"].get<double>());
    longest_handoff = std::max(longest_handoff, sg["handoff"]["end_s"].get<double>()
                                                  - sg["handoff"]["start_s"].get<double>());
  }
  CHECK(longest_wait > 2);
  CHECK(longest_handoff == Approx(1.0).margin(1e-3));
  // The summary's makespan is the last decode's end.
  CHECK(st["summary"]["makespan_s"].get<double>() ==
        Approx(decodes.back().second).margin(2e-3));
  // Lanes in the configured order of the mode, with their hosts.
  CHECK(st["lanes"]["pools"][0]["name"] == "a2");
  CHECK(st["lanes"]["pools"][1]["name"] == "a1");
  CHECK(st["lanes"]["decoders"][0]["host"] == "b");
}

TEST_CASE("status: a running run shows what runs now, failed attempts and outages",
          "[status][stages]") {
  line l;
  l.s.p.lease_s = 0.5;  // host a's pools report only with results: their leases run out
  start(l, 4);
  l.run(6);
  // Host a goes down at 6 s: the pools' attempts are lost (their leases ended), and the
  // host comes back at 9 s, its pools reporting again.
  l.t = l.base + 6;
  l.sched_event(actors::coordinator::ev_peer{"a", false});
  l.t = l.base + 9;
  l.sched_event(actors::coordinator::ev_peer{"a", true});
  for (auto* p : {"a1", "a2"}) {
    msg::pool_status ps;
    ps.pool = p;
    ps.host = "a";
    ps.epoch = 2;
    ps.seq = 1;
    l.sched_event(actors::coordinator::ev_pool_status{ps});
  }
  auto st = status_of(l, l.base + 9.5);
  INFO(st.dump(2));
  CHECK(st["state"] == "running");
  CHECK(st["now_s"].get<double>()
        == Approx(l.base + 9.5 - l.s.runs.back().submitted_at).margin(1e-3));
  REQUIRE(st["outages"].size() == 1);
  CHECK(st["outages"][0]["host"] == "a");
  CHECK(st["outages"][0]["to_s"].get<double>() > st["outages"][0]["from_s"].get<double>());
  std::size_t failed = 0, running = 0;
  for (auto& j : st["jobs"]) {
    for (auto& f : j["failed_attempts"]) {
      ++failed;
      CHECK(f["stage"] == "sampling");
      CHECK(f["end_s"].get<double>() >= f["start_s"].get<double>());
      CHECK_THAT(f["reason"].get<std::string>(), Catch::Contains("host a went down"));
    }
    if (j["running"].is_object())
      ++running;
  }
  CHECK(failed == 2);   // the two pools' first jobs
  CHECK(running == 2);  // sampled again now that host a is back
}

TEST_CASE("status: bytes per job stay modest", "[status][stages][size]") {
  line l;
  l.base = 1718000000;  // real unix stamps are this long
  start(l, 6);
  l.run(200);
  auto st = status_of(l, l.t);
  REQUIRE(st["state"] == "succeeded");
  // A finished job with a long output path, as the coordinator sends it (compact JSON).
  for (auto& j : st["jobs"]) {
    j["output"] = "/var/lib/vidline/outputs/20240101-120000-beef/job-0003-seed-987654321126.mp4";
    j["latent_sha256"] = std::string(64, 'a');
    j["output_sha256"] = std::string(64, 'b');
  }
  const double per_job = static_cast<double>(st["jobs"].dump().size()) / st["jobs"].size();
  WARN("status bytes per job: " << per_job);
  if (std::getenv("VIDLINE_DUMP_STATUS") != nullptr)
    std::printf("%s\n", st.dump().c_str());
  // A job also carries what its output was made from (workflow, model, params, input
  // digests, ident, key), its review and its energy: ~1.8 KB. Status pages keep a frame
  // within max_frame_bytes however many jobs a run has (docs/design.md, "Status pages").
  CHECK(per_job < 2500);  // docs/exit-codes.md: the jobs a frame holds
}
