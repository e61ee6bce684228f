// The planner on the embedded reference cluster and profile: faithful to the measured
// batches, refuses what cannot run, auto never behind a fixed mode, JSON names, Gantt SVG.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <fstream>

#include "actors/planner/gantt.hpp"
#include "actors/planner/reference_rows.hpp"
#include "nodes/verbs/plan_cmd.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;

namespace {

actors::planner::plan_result plan(const nodes::verbs::plan_setup& s, const std::string& mode, uint32_t w,
                          uint32_t h, uint32_t secs, uint32_t count) {
  actors::planner::request req;
  req.mode = mode;
  req.width = w;
  req.height = h;
  req.seconds = secs;
  req.count = count;
  req.seed = 987654321123ull;
  return actors::planner::plan(s.state, *s.est, req);
}

} // namespace

TEST_CASE("the plan reproduces the reference's 8 measured batches within 10%") {
  auto s = nodes::verbs::load_plan_setup("", "");
  for (auto& r : actors::planner::reference_rows) {
    auto p = plan(s, std::string(r.mode), r.width, r.height, r.seconds, r.count);
    INFO(r.name << ": plan " << p.summary.makespan_s << " s, measured " << r.makespan_s);
    REQUIRE(p.refused.empty());
    REQUIRE(p.finished);
    CHECK(p.policy == std::string("in_turn"));
    CHECK(p.summary.succeeded == r.count);
    CHECK(std::abs(p.summary.makespan_s / r.makespan_s - 1) <= 0.10);
    CHECK(std::abs(p.summary.first_finish_s / r.first_s - 1) <= 0.10);
  }
}

TEST_CASE("dispatch in turn explains the 8 x T10 + XTX row, first-free dispatch does not") {
  auto in_turn = nodes::verbs::load_plan_setup("", "");
  auto greedy = nodes::verbs::load_plan_setup("", "", "first_free");
  auto a = plan(in_turn, "eight_xtx_plus_one", 736, 1280, 5, 6);
  auto b = plan(greedy, "eight_xtx_plus_one", 736, 1280, 5, 6);
  CHECK(b.policy == std::string("first_free"));
  CHECK(std::abs(a.summary.makespan_s / 945.328 - 1) <= 0.02);
  CHECK(b.summary.makespan_s / 945.328 - 1 < -0.20);
  // In turn: jobs 0, 2, 4 on the 8 x T10 pool, 1, 3, 5 on the XTX.
  for (auto& j : a.jobs)
    CHECK(j.pool == (j.index % 2 == 0 ? "eight" : "xtx"));
}

TEST_CASE("a batch no pool of the mode can hold is refused before simulating") {
  auto s = nodes::verbs::load_plan_setup("", "");
  auto p = plan(s, "four_four_plus_one", 736, 1280, 10, 3);  // load 9,420,800 > 4,710,400
  CHECK_FALSE(p.refused.empty());
  CHECK(p.refused.find("no pool of mode four_four_plus_one can hold 736x1280, 10 s")
        != std::string::npos);
  CHECK(p.refused.find("four_a (t10x4) holds up to 4,710,400") != std::string::npos);
  CHECK(p.jobs.empty());
  // The 8 x T10 pool holds it: the mode with it plans.
  auto ok = plan(s, "eight_xtx_plus_one", 736, 1280, 10, 3);
  CHECK(ok.refused.empty());
  CHECK(ok.summary.succeeded == 3);
  // Too big for every pool: refused in every mode, auto included.
  for (auto& m : actors::planner::modes_to_compare(s.state, s.cluster))
    CHECK_FALSE(plan(s, m, 1280, 1280, 15, 1).refused.empty());
  CHECK(plan(s, "no_such_mode", 416, 736, 5, 1).refused.find("unknown mode") == 0);
}

TEST_CASE("auto is never behind the best fixed mode (small grid)") {
  auto s = nodes::verbs::load_plan_setup("", "");
  for (auto size : {std::array<uint32_t, 3>{416, 736, 5}, std::array<uint32_t, 3>{736, 1280, 5},
                    std::array<uint32_t, 3>{736, 1280, 10}})
    for (uint32_t n : {1u, 2u, 6u, 12u}) {
      double best = 1e300;
      for (auto& m : s.cluster.modes) {
        auto p = plan(s, m.name, size[0], size[1], size[2], n);
        if (p.refused.empty() && p.finished && p.summary.failed == 0)
          best = std::min(best, p.summary.makespan_s);
      }
      auto a = plan(s, "auto", size[0], size[1], size[2], n);
      INFO(size[0] << "x" << size[1] << "x" << size[2] << " count " << n << ": auto "
                   << a.summary.makespan_s << ", best fixed " << best);
      REQUIRE(a.finished);
      CHECK(a.summary.succeeded == n);
      CHECK(a.summary.makespan_s <= best + 1e-6);
    }
}

TEST_CASE("plan JSON uses the status contract's names") {
  auto s = nodes::verbs::load_plan_setup("", "");
  actors::planner::request req;
  req.mode = "four_four_xtx_plus_one";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 6;
  req.seed = 987654321123ull;
  auto p = actors::planner::plan(s.state, *s.est, req);
  auto j = nodes::verbs::plan_json(p, req);
  REQUIRE(j.contains("summary"));
  for (auto* k : {"succeeded", "failed", "first_finish_s", "makespan_s", "clips_per_hour"})
    CHECK(j["summary"].contains(k));
  CHECK(j["summary"]["makespan_s"].get<double>() == Approx(p.summary.makespan_s));
  CHECK(j["summary"]["clips_per_hour"].get<double>() == Approx(6 * 3600.0 / p.summary.makespan_s));
  REQUIRE(j["jobs"].size() == 6);
  for (auto& job : j["jobs"]) {
    CHECK(job["pool"].is_string());
    CHECK(job["seed"].get<uint64_t>() == 987654321123ull + job["index"].get<uint64_t>());
    for (auto* stage : {"sampling", "handoff", "decode"}) {
      REQUIRE(job["stages"][stage].is_object());
      CHECK(job["stages"][stage]["end_s"].get<double>()
            >= job["stages"][stage]["start_s"].get<double>());
    }
  }
  // In turn over four_a, four_b, xtx.
  CHECK(j["jobs"][0]["pool"] == "four_a");
  CHECK(j["jobs"][1]["pool"] == "four_b");
  CHECK(j["jobs"][2]["pool"] == "xtx");
  CHECK(j["jobs"][5]["pool"] == "xtx");
  auto refused = plan(s, "four_four_plus_one", 736, 1280, 10, 1);
  CHECK(nodes::verbs::plan_json(refused, req).contains("refused"));
}

TEST_CASE("the Gantt chart has a lane per pool and decoder, stage colours and a legend") {
  auto s = nodes::verbs::load_plan_setup("", "");
  auto p = plan(s, "four_four_xtx_plus_one", 416, 736, 5, 6);
  actors::planner::gantt_chart c;
  c.title = "four_four_xtx_plus_one";
  c.lanes = {"four_a", "four_b", "xtx", "rtx3080ti"};
  c.spans = p.spans;
  auto svg = actors::planner::gantt_svg({c});
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("</svg>") != std::string::npos);
  for (auto* lane : {"four_a", "four_b", "xtx", "rtx3080ti"})
    CHECK(svg.find(std::string(">") + lane + "</text>") != std::string::npos);
  for (auto* stage : {"conditioning", "sampling", "handoff", "decode"})
    CHECK(svg.find(std::string(">") + stage + "</text>") != std::string::npos);
  CHECK(svg.find("seconds from submission") != std::string::npos);
  // One bar per span.
  std::size_t bars = 0;
  for (auto at = svg.find("<title>job "); at != std::string::npos; at = svg.find("<title>job ", at + 1))
    ++bars;
  CHECK(bars == p.spans.size());
}

TEST_CASE("the issue's example: auto ahead of every fixed mode, a freed T10 decoding the last 4 x T10 latent") {
  // 736x1280x5 x 6. four_four_xtx_plus_one: 688.0 s (the one 3080 Ti has the last three
  // latents from 593.0 s on, 31.654 s each). auto: four_a, four_b and the XTX take 2 jobs
  // each as there; at 592.3 s one 4 x T10 latent goes to t10_a (host A's t10-7, 72.588 s:
  // done 664.9), so the XTX's last latent (27 + 351.094 + 267.790 = 645.884) is decoded at
  // once: 645.884 + 31.654 = 677.538.
  auto s = nodes::verbs::load_plan_setup("", "");
  double best_fixed = 1e300;
  for (auto& m : s.cluster.modes)
    best_fixed = std::min(best_fixed, plan(s, m.name, 736, 1280, 5, 6).summary.makespan_s);
  auto a = plan(s, "auto", 736, 1280, 5, 6);
  REQUIRE(a.finished);
  CHECK(a.summary.succeeded == 6);
  CHECK(best_fixed == Approx(687.963).margin(0.01));
  CHECK(a.summary.makespan_s == Approx(677.538).margin(0.01));
  CHECK(a.summary.makespan_s < best_fixed - 10);
  int on_t10 = 0;
  for (auto& j : a.jobs) {
    on_t10 += j.decoder == "t10_a";
    if (j.decoder == "t10_a") {
      CHECK((j.pool == "four_a" || j.pool == "four_b"));
      CHECK(j.decode->start == Approx(592.301).margin(0.01));
    }
  }
  CHECK(on_t10 == 1);
}

TEST_CASE("plan energy: each stage's length times its kind's watts, unknown without them") {
  // The embedded profile has no power figures: the energy is unknown, naming the kinds.
  auto s = nodes::verbs::load_plan_setup("", "");
  auto bare = plan(s, "four_four_xtx_plus_one", 416, 736, 5, 6);
  CHECK(bare.energy_j < 0);
  CHECK(bare.wh_per_clip < 0);
  CHECK_FALSE(bare.unpowered.empty());
  auto bare_json = nodes::verbs::plan_json(bare, actors::planner::request{});
  CHECK(bare_json["summary"]["wh_per_clip"].is_null());
  CHECK(bare_json["summary"]["energy_unknown_for"].size() == bare.unpowered.size());

  // A profile with watts for every kind: energy = sum of spans x watts, per clip.
  auto prof = nlohmann::json::parse(std::string(config::profile::profile::reference_json()));
  std::map<std::string, double> pool_w, dec_w;
  double w = 100;
  for (auto& [kind, p] : prof["pools"].items()) {
    p["power"] = {{"watts", w}, {"source", "test"}};
    pool_w[kind] = w;
    w += 100;
  }
  for (auto& [kind, d] : prof["decoders"].items()) {
    d["power"] = {{"watts", w}, {"source", "test"}};
    dec_w[kind] = w;
    w += 50;
  }
  testing_support::temp_dir dir;
  std::ofstream(dir.path() + "/powered.json") << prof.dump();
  auto powered_setup = nodes::verbs::load_plan_setup("", dir.path() + "/powered.json");
  auto p = plan(powered_setup, "four_four_xtx_plus_one", 416, 736, 5, 6);
  REQUIRE(p.unpowered.empty());
  REQUIRE(p.summary.succeeded == 6);
  double expect = 0;
  for (auto& j : p.jobs) {
    auto pool_kind = powered_setup.state.pools.at(j.pool).kind;
    auto dec_kind = powered_setup.state.decoders.at(j.decoder).kind;
    REQUIRE(j.sampling);
    REQUIRE(j.decode);
    double from = j.conditioning ? j.conditioning->start : j.sampling->start;
    expect += pool_w.at(pool_kind) * (j.sampling->end - from)
              + dec_w.at(dec_kind) * (j.decode->end - j.decode->start);
  }
  CHECK(p.energy_j == Approx(expect).epsilon(1e-6));
  CHECK(p.wh_per_clip == Approx(expect / 3600 / 6).epsilon(1e-6));
  auto j = nodes::verbs::plan_json(p, actors::planner::request{});
  CHECK(j["summary"]["wh_per_clip"].get<double>() == Approx(p.wh_per_clip));
  CHECK(j["summary"]["clips_per_kwh"].get<double>() == Approx(1000 / p.wh_per_clip));
}
