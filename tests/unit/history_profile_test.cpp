// `vidline profile build`'s grouping: measured stage times by kind x size x cold/warm, the
// median as the time and min/max as the spread, out-of-memory results as capacity, the
// rest from the base profile; the result reads as a profile.
#include <catch2/catch.hpp>

#include "actors/coordinator/records.hpp"
#include "config/profile/profile.hpp"
#include "nodes/verbs/profile_cmd.hpp"

using namespace vidline;
using config::profile::model_state;
using config::profile::profile;
using nlohmann::json;

namespace {

actors::coordinator::job sampled(uint32_t w, uint32_t h, uint32_t s, const std::string& pool_kind, bool cold,
                   double sampling_s) {
  actors::coordinator::job j;
  j.spec.width = w;
  j.spec.height = h;
  j.spec.seconds = s;
  j.state = actors::coordinator::job_state::sampled;
  j.pool_kind = pool_kind;
  j.encoder_kind = "t10x4";
  j.cold = cold;
  j.sampling_s = sampling_s;
  j.sample_end = 100;
  j.latent_sha256 = "ab";
  return j;
}

actors::coordinator::job decoded(actors::coordinator::job j, double decode_s, double handoff_s, bool same_host) {
  j.state = actors::coordinator::job_state::succeeded;
  j.decoder_kind = "rtx3080ti";
  j.decode_s = decode_s;
  j.handoff_s = handoff_s;
  j.handoff_same_host = same_host;
  j.decode_end = 200;
  return j;
}

json base() { return json::parse(std::string(profile::reference_json())); }

} // namespace

TEST_CASE("profile build: medians and spreads per kind x size x cold/warm over the base") {
  std::deque<actors::coordinator::run> runs(2);
  runs[0].id = "run-one";
  runs[1].id = "run-two";
  auto first = sampled(416, 736, 5, "t10x4", true, 100);
  first.conditioning_s = 20;
  runs[0].jobs.push_back(decoded(first, 10, 0.5, false));
  runs[0].jobs.push_back(decoded(sampled(416, 736, 5, "t10x4", false, 64), 14, 0.9, false));
  runs[1].jobs.push_back(decoded(sampled(416, 736, 5, "t10x4", false, 60), 12, 0.7, false));
  runs[1].jobs.push_back(sampled(416, 736, 5, "t10x4", false, 62));  // not decoded yet
  runs[1].jobs.push_back(decoded(sampled(416, 736, 5, "rx7900xtx", true, 150), 12, 0, true));
  runs[1].jobs.push_back(sampled(416, 736, 5, "h100x1", true, 30));
  runs[1].jobs.push_back(sampled(416, 736, 5, "h100x1", false, 20));
  runs[1].jobs.push_back(sampled(736, 1280, 5, "h100x1", true, 80));
  auto oom = sampled(736, 1280, 10, "t10x8", false, 0);
  oom.state = actors::coordinator::job_state::failed;
  oom.latent_sha256.clear();
  oom.capacity_failed = {"t10x8"};
  runs[1].jobs.push_back(oom);

  auto learned = nodes::verbs::profile_from_history(runs, base(), "embedded reference");
  auto p = profile::from_json(learned);
  const config::profile::job_size small{416, 736, 5};

  auto warm = p.sampling("t10x4", small, model_state::warm);
  CHECK(warm.s == Approx(62));  // 60, 62, 64
  CHECK(warm.min_s == Approx(60));
  CHECK(warm.max_s == Approx(64));
  for (auto& row : learned["pools"]["t10x4"]["sampling"])
    if (row["size"] == "416x736x5")
      CHECK_THAT(row["warm"]["source"].get<std::string>(), Catch::Contains("run-one, run-two"));
  CHECK(p.sampling("t10x4", small, model_state::cold).s == Approx(100));
  // Only cold measured on the XTX: its warm time stays the base's.
  CHECK(p.sampling("rx7900xtx", small, model_state::cold).s == Approx(150));
  CHECK(p.sampling("rx7900xtx", small, model_state::warm).s
        == Approx(profile::reference().sampling("rx7900xtx", small, model_state::warm).s));
  // A kind the base does not know, measured both ways at one size (cold_extra 10) and cold
  // only at another (warm = cold - cold_extra).
  REQUIRE(p.has_pool("h100x1"));
  CHECK(p.sampling("h100x1", small, model_state::warm).s == Approx(20));
  CHECK(p.sampling("h100x1", small, model_state::cold).s == Approx(30));
  CHECK(p.sampling("h100x1", {736, 1280, 5}, model_state::warm).s == Approx(70));
  // Out of memory at 736x1280x10 on the 8 x T10: its limit drops to the largest load below
  // that it has a time for (544x960x15), and the 736x1280x10 row goes.
  CHECK(*p.capacity("t10x8").max_load == 544u * 960 * 15);
  CHECK_FALSE(p.fits("t10x8", {736, 1280, 10}));
  CHECK_THAT(learned["pools"]["t10x8"]["capacity"]["source"].get<std::string>(),
             Catch::Contains("run-two (736x1280x10)"));
  // Unmeasured entries stay the base's.
  CHECK(p.sampling("t10x8", small, model_state::warm).s
        == Approx(profile::reference().sampling("t10x8", small, model_state::warm).s));
  auto decode = p.decode("rtx3080ti", small);
  CHECK(decode.s == Approx(12));  // 10, 14, 12, 12
  CHECK(decode.min_s == Approx(10));
  CHECK(decode.max_s == Approx(14));
  CHECK(p.conditioning("t10x4").s == Approx(20));
  CHECK(p.handoff(false).s == Approx(0.7));
  CHECK(p.handoff(false).max_s == Approx(0.9));
  CHECK(p.handoff(true).s == Approx(0));
  CHECK(p.name() == "history");
}

TEST_CASE("profile build: a history without measured stages is refused") {
  std::deque<actors::coordinator::run> runs(1);
  runs[0].id = "old";
  actors::coordinator::job j = sampled(416, 736, 5, "", true, 100);  // a record from before kinds were kept
  runs[0].jobs.push_back(j);
  CHECK_THROWS_WITH(nodes::verbs::profile_from_history(runs, base(), "embedded reference"),
                    Catch::Contains("no measured stage"));
}

TEST_CASE("profile build: watts per pool and decoder kind from the stages' telemetry energy") {
  std::deque<actors::coordinator::run> runs(2);
  runs[0].id = "run-one";
  runs[1].id = "run-two";
  // Two sampling stages on t10x4: 30 kJ over 100 s (its stage clock) and 10 kJ over 60 s
  // (no clock: conditioning + sampling seconds). Energy over time: 40 kJ / 160 s = 250 W.
  auto a = sampled(416, 736, 5, "t10x4", true, 90);
  a.ran.pool_start = 10;
  a.ran.sampler_end = 110;
  a.sampling_energy_j = 30000;
  a = decoded(a, 10, 0.5, false);
  a.ran.decode_start = 120;
  a.ran.decode_end = 130;
  a.decode_energy_j = 1000;  // 100 W over its clock's 10 s
  runs[0].jobs.push_back(a);
  auto b = sampled(416, 736, 5, "t10x4", false, 50);
  b.conditioning_s = 10;
  b.sampling_energy_j = 10000;
  b = decoded(b, 30, 0.5, false);
  b.decode_energy_j = 5000;  // 5 kJ over decode_s 30 (no clock): 6 kJ / 40 s = 150 W
  runs[1].jobs.push_back(b);
  // A stage without telemetry (-1) and one on a kind without timings add nothing.
  auto c = decoded(sampled(416, 736, 5, "t10x4", false, 55), 12, 0.5, false);
  runs[1].jobs.push_back(c);

  auto learned = nodes::verbs::profile_from_history(runs, base(), "embedded reference");
  auto p = profile::from_json(learned);
  REQUIRE(p.pools().at("t10x4").power);
  CHECK(p.pools().at("t10x4").power->watts == Approx(250));
  CHECK_THAT(p.pools().at("t10x4").power->source,
             Catch::Contains("2 sampling stages") && Catch::Contains("run-one, run-two"));
  REQUIRE(p.decoders().at("rtx3080ti").power);
  CHECK(p.decoders().at("rtx3080ti").power->watts == Approx(150));
  // Kinds no stage with telemetry ran on keep what the base said: nothing.
  CHECK_FALSE(p.pools().at("t10x8").power);
  CHECK_FALSE(p.decoders().at("t10").power);
}

TEST_CASE("profile build: kinds under their old names, in the journal or the base, are learned under the current ones") {
  // A journal written before the XTX's kind took its model's name: its records say "xtx".
  auto record = actors::coordinator::job_record(decoded(sampled(416, 736, 5, "rx7900xtx", true, 150), 12, 0, true));
  record["pool_kind"] = "xtx";
  record["encoder_kind"] = "xtx";
  record["capacity_failed"] = {"xtx"};
  const auto old = actors::coordinator::job_from_record(record);
  CHECK(old.pool_kind == "rx7900xtx");
  CHECK(old.encoder_kind == "rx7900xtx");
  CHECK(old.capacity_failed == std::set<std::string>{"rx7900xtx"});

  // A base profile file of that time: its "xtx" entry takes the measurements, renamed.
  json old_base = base();
  old_base["pools"]["xtx"] = old_base["pools"]["rx7900xtx"];
  old_base["pools"].erase("rx7900xtx");
  old_base["encoders"]["xtx"] = old_base["encoders"]["rx7900xtx"];
  old_base["encoders"].erase("rx7900xtx");
  std::deque<actors::coordinator::run> runs(1);
  runs[0].id = "run-one";
  auto j = actors::coordinator::job_from_record(record);
  j.capacity_failed.clear();
  j.conditioning_s = 30;
  runs[0].jobs.push_back(j);
  auto learned = nodes::verbs::profile_from_history(runs, old_base, "an old profile");
  CHECK_FALSE(learned["pools"].contains("xtx"));
  CHECK_FALSE(learned["encoders"].contains("xtx"));
  auto p = profile::from_json(learned);
  CHECK(p.old_names().empty());
  CHECK(p.sampling("rx7900xtx", {416, 736, 5}, model_state::cold).s == Approx(150));
  CHECK(p.conditioning("rx7900xtx").s == Approx(30));
}

TEST_CASE("profile build: a kind measured with two models learns the second as a models entry") {
  // The h100x1 kind ran model A (3 warm, 1 cold) and model B (2 warm at twice A's time, 1
  // cold 50 s above its warm): rows from A, B as warm_factor 2 and load 50.
  std::deque<actors::coordinator::run> runs(1);
  runs[0].id = "run-models";
  auto with = [](actors::coordinator::job j, const std::string& model) {
    j.spec.model = model;
    return j;
  };
  runs[0].jobs.push_back(with(sampled(416, 736, 5, "h100x1", true, 40), "A"));
  for (double s : {19.0, 20.0, 21.0})
    runs[0].jobs.push_back(with(sampled(416, 736, 5, "h100x1", false, s), "A"));
  runs[0].jobs.push_back(with(sampled(416, 736, 5, "h100x1", false, 40), "B"));
  runs[0].jobs.push_back(with(sampled(416, 736, 5, "h100x1", false, 40), "B"));
  runs[0].jobs.push_back(with(sampled(416, 736, 5, "h100x1", true, 90), "B"));
  auto learned = nodes::verbs::profile_from_history(runs, base(), "embedded reference");
  auto p = profile::from_json(learned);
  const config::profile::job_size small{416, 736, 5};
  CHECK(p.sampling("h100x1", small, model_state::warm, "A").s == Approx(20));
  CHECK(p.sampling("h100x1", small, model_state::cold, "A").s == Approx(40));
  CHECK(p.sampling("h100x1", small, model_state::warm, "B").s == Approx(40));
  CHECK(p.sampling("h100x1", small, model_state::cold, "B").s == Approx(90));
  REQUIRE(learned["pools"]["h100x1"]["models"].contains("B"));
  CHECK_FALSE(learned["pools"]["h100x1"]["models"].contains("A"));
  CHECK_THAT(learned["pools"]["h100x1"]["models"]["B"]["source"].get<std::string>(),
             Catch::Contains("against model A"));
}
