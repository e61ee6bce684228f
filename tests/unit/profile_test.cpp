// The timing/capacity profile: the reference numbers, the lookup rules (docs/profile.md),
// capacity, and the errors a bad profile file gets.

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

#include "config/config.hpp"
#include "config/profile/kinds.hpp"
#include "config/profile/profile.hpp"

namespace {

using namespace vidline::config::profile;
using json = nlohmann::json;
using Catch::Detail::Approx;

json reference_json() { return json::parse(std::string(profile::reference_json())); }

/// The path of the profile_error a mutated reference profile gets ("none" when accepted).
std::string error_path(const std::function<void(json&)>& mutate) {
  json j = reference_json();
  mutate(j);
  try {
    profile::from_json(j);
  } catch (const profile_error& e) {
    return e.path();
  }
  return "none";
}

} // namespace

TEST_CASE("job_size parses WxHxS and nothing else", "[profile]") {
  auto s = job_size::parse("416x736x5");
  REQUIRE(s);
  CHECK(*s == job_size{416, 736, 5});
  CHECK(s->load() == 1530880);
  CHECK(s->str() == "416x736x5");
  for (const char* bad : {"", "416x736", "416x736x5x1", "0x736x5", "416x736x05", "-4x7x5",
                          "416 x736x5", "416x736x5 ", "99999999999x1x1", "axbxc"})
    CHECK_FALSE(job_size::parse(bad));
}

TEST_CASE("the reference profile has the reference line's kinds", "[profile]") {
  auto p = profile::reference();
  CHECK(p.name() == "reference");
  for (const char* k : {"t10x8", "t10x4", "rx7900xtx"})
    CHECK(p.has_pool(k));
  for (const char* k : {"rtx3080ti", "t10"})
    CHECK(p.has_decoder(k));
  for (const char* k : {"t10x4", "rx7900xtx", "t10"})
    CHECK(p.has_encoder(k));
  CHECK(p.latent().bytes == 13000000);
  CHECK(p.latent().size == job_size{416, 736, 5});
}

TEST_CASE("sampling: measured and batch-derived entries", "[profile]") {
  auto p = profile::reference();
  auto warm = p.sampling("t10x8", {416, 736, 5}, model_state::warm);
  CHECK(warm.s == Approx(61.495));
  CHECK(warm.basis == "entry 416x736x5");
  auto cold = p.sampling("t10x8", {416, 736, 5}, model_state::cold);
  CHECK(cold.s == Approx(107.534));
  CHECK(cold.min_s == Approx(97.335));  // the single-job row
  CHECK(cold.max_s == Approx(107.534));
  CHECK(p.sampling("t10x8", {736, 1280, 5}, model_state::warm).s == Approx(157.115));
  CHECK(p.sampling("t10x4", {416, 736, 5}, model_state::warm).s == Approx(75.261));
  CHECK(p.sampling("t10x4", {416, 736, 5}, model_state::cold).max_s == Approx(216.754));
  CHECK(p.sampling("t10x4", {736, 1280, 5}, model_state::warm).s == Approx(277.884));
  CHECK(p.sampling("rx7900xtx", {416, 736, 5}, model_state::warm).s == Approx(66.382));

  // Rows with one state only get the other from the pool kind's cold_extra.
  auto filled = p.sampling("t10x8", {544, 960, 15}, model_state::warm);
  CHECK(filled.s == Approx(315.665 - 41.076));
  auto xtx10 = p.sampling("rx7900xtx", {736, 1280, 10}, model_state::cold);
  CHECK(xtx10.s == Approx(336.881 + 88.922));
}

TEST_CASE("sampling: unmeasured sizes go by load w*h*s", "[profile]") {
  auto p = profile::reference();
  const double l416 = 1530880, l736 = 4710400;

  SECTION("between two measured loads: linear") {
    job_size s{640, 1152, 5};  // load 3,686,400
    double f = (double(s.load()) - l416) / (l736 - l416);
    auto e = p.sampling("t10x8", s, model_state::warm);
    CHECK(e.s == Approx(61.495 + f * (157.115 - 61.495)));
    CHECK(e.basis == "interpolated by load between 416x736x5 and 736x1280x5");
    auto c = p.sampling("t10x8", s, model_state::cold);
    CHECK(c.min_s == Approx(97.335 + f * (193.228 - 97.335)));
  }
  SECTION("below the smallest: proportional") {
    auto e = p.sampling("t10x4", {208, 368, 5}, model_state::warm);
    CHECK(e.s == Approx(75.261 / 4));
    CHECK(e.basis == "scaled by load from 416x736x5");
  }
  SECTION("above the largest: the last segment's line, not below proportional") {
    job_size s{640, 1152, 15};  // 11,059,200
    double a = 7833600, b = 9420800;
    double wa = 315.665 - 41.076, wb = 429.05 - 41.076;
    double line = wb + (double(s.load()) - b) * (wb - wa) / (b - a);
    auto e = p.sampling("t10x8", s, model_state::warm);
    CHECK(e.s == Approx(std::max(line, wb * double(s.load()) / b)));
    CHECK(e.basis == "extrapolated by load from 544x960x15 and 736x1280x10");
    // t10x4's last segment is steep enough that the line wins too.
    auto f = p.sampling("t10x4", {736, 1280, 10}, model_state::warm);
    double slope = (277.884 - 75.261) / (l736 - l416);
    CHECK(f.s == Approx(277.884 + (9420800 - l736) * slope));
    CHECK(f.s > 277.884 * 2);
  }
  SECTION("same load, other shape: that load's time") {
    auto e = p.sampling("t10x8", {736, 416, 5}, model_state::warm);
    CHECK(e.s == Approx(61.495));
    CHECK(e.basis == "same load as 416x736x5");
  }
  CHECK_THROWS_AS(p.sampling("a100x8", {416, 736, 5}, model_state::warm), profile_error);
}

TEST_CASE("capacity: max load per pool kind, fails after a time", "[profile]") {
  auto p = profile::reference();
  CHECK(p.fits("t10x8", {736, 1280, 10}));
  CHECK_FALSE(p.fits("t10x8", {640, 1152, 15}));
  CHECK(p.capacity("t10x8").fail_after_s == Approx(204.389));
  CHECK(p.fits("t10x4", {736, 1280, 5}));
  CHECK_FALSE(p.fits("t10x4", {736, 1280, 10}));
  CHECK_FALSE(p.fits("t10x4", {544, 960, 15}));
  CHECK(p.fits("rx7900xtx", {736, 1280, 10}));
  CHECK_FALSE(p.capacity("t10x4").source.empty());
}

TEST_CASE("conditioning, decode and handoff", "[profile]") {
  auto p = profile::reference();
  CHECK(p.conditioning("t10x4").s == Approx(13.06));
  CHECK(p.conditioning("t10").s == Approx(27));
  CHECK(p.conditioning("rx7900xtx").s == Approx(27));
  CHECK_THROWS_AS(p.conditioning("h100"), profile_error);

  auto d = p.decode("rtx3080ti", {416, 736, 5});
  CHECK(d.s == Approx(12.02));
  CHECK(d.min_s == Approx(11.859));
  CHECK(d.max_s == Approx(12.181));
  CHECK(p.decode("rtx3080ti", {736, 1280, 5}).s == Approx(31.654));
  CHECK(p.decode("rtx3080ti", {736, 1280, 10}).s == Approx(59.319));
  CHECK(p.decode("rtx3080ti", {544, 960, 15}).s == Approx(50.405));
  CHECK(p.decode("t10", {736, 1280, 5}).s == Approx(72.588));
  auto t = p.decode("t10", {416, 736, 5});
  CHECK(t.s == Approx(12.02 * 2.2932));
  CHECK_THAT(t.basis, Catch::Contains("rtx3080ti"));
  CHECK(p.decode("t10", {736, 1280, 10}).s == Approx(59.319 * 2.2932));

  auto h = p.handoff(false);
  CHECK(h.s == Approx(0.7));
  CHECK(h.min_s == Approx(0.5));
  CHECK(h.max_s == Approx(0.9));
  CHECK(p.handoff(true).s == 0);
}

TEST_CASE("the XTX entries say they are fitted, not measured", "[profile]") {
  auto j = reference_json();
  for (const auto& row : j["pools"]["rx7900xtx"]["sampling"])
    for (const char* state : {"cold", "warm"})
      if (row.contains(state))
        CHECK_THAT(row[state]["source"].get<std::string>(),
                   Catch::Contains("FITTED") || Catch::Contains("DERIVED"));
  CHECK_THAT(j["encoders"]["rx7900xtx"]["source"].get<std::string>(), Catch::Contains("ASSUMPTION"));
}

TEST_CASE("a bad profile is refused, naming the field", "[profile]") {
  CHECK(error_path([](json&) {}) == "none");
  CHECK(error_path([](json& j) { j["format"] = "other"; }) == "/format");
  CHECK(error_path([](json& j) { j["version"] = 2; }) == "/version");
  CHECK(error_path([](json& j) { j["speed"] = 2; }) == "/speed");
  CHECK(error_path([](json& j) { j.erase("name"); }) == "/name");
  CHECK(error_path([](json& j) { j["latent"]["bytes"] = 0; }) == "/latent/bytes");
  CHECK(error_path([](json& j) { j["pools"] = json::object(); }) == "/pools");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"].erase("capacity"); }) ==
        "/pools/t10x8/capacity");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][0]["size"] = "416x736"; }) ==
        "/pools/t10x8/sampling/0/size");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][1]["warm"]["s"] = -1; }) ==
        "/pools/t10x8/sampling/1/warm/s");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][1]["warm"]["s"] = "fast"; }) ==
        "/pools/t10x8/sampling/1/warm/s");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][0]["warm"]["min_s"] = 99; }) ==
        "/pools/t10x8/sampling/0/warm/min_s");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][0]["warm"].erase("source"); }) ==
        "/pools/t10x8/sampling/0/warm/source");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][0]["warm"]["s"] = 500; }) ==
        "/pools/t10x8/sampling/0/cold/s");
  CHECK(error_path([](json& j) {
          j["pools"]["t10x8"]["sampling"][1]["size"] = "416x736x5";
        }) == "/pools/t10x8/sampling");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["capacity"]["max_load"] = 1000; }) ==
        "/pools/t10x8/sampling/0/size");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"].erase("cold_extra"); }) ==
        "/pools/t10x8/sampling/2");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["sampling"][0].erase("cold");
                                 j["pools"]["t10x8"]["sampling"][0].erase("warm"); }) ==
        "/pools/t10x8/sampling/0");
  CHECK(error_path([](json& j) { j["decoders"]["t10"]["scale_of"]["decoder"] = "gone"; }) ==
        "/decoders/t10/scale_of/decoder");
  CHECK(error_path([](json& j) { j["decoders"]["t10"]["decode"][0]["speed"] = 1; }) ==
        "/decoders/t10/decode/0/speed");
  CHECK(error_path([](json& j) { j["encoders"]["t10x4"] = 13.06; }) == "/encoders/t10x4");
  CHECK(error_path([](json& j) { j["handoff"].erase("same_host"); }) == "/handoff/same_host");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["power"] = {{"watts", 0}, {"source", "x"}}; })
        == "/pools/t10x8/power/watts");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["power"] = {{"watts", 500}}; })
        == "/pools/t10x8/power/source");
  CHECK(error_path([](json& j) { j["decoders"]["t10"]["power"] = {{"watts", "high"},
                                                                   {"source", "x"}}; })
        == "/decoders/t10/power/watts");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["power"] = {{"watts", 500}, {"source", "x"},
                                                                 {"volts", 12}}; })
        == "/pools/t10x8/power/volts");
  CHECK(error_path([](json& j) { j["pools"]["t10x8"]["power"] = {{"watts", 512.5},
                                                                 {"source", "measured"}};
                                 j["decoders"]["t10"]["power"] = {{"watts", 70},
                                                                   {"source", "measured"}}; })
        == "none");
  CHECK(error_path([](json& j) { j["pools"]["a/b"] = j["pools"]["rx7900xtx"];
                                 j["pools"]["a/b"]["shape"] = 1; }) == "/pools/a~1b/shape");

  try {
    profile::from_json(json{{"format", "vidline-profile"}, {"version", 1}, {"name", ""}});
    FAIL("accepted an empty name");
  } catch (const profile_error& e) {
    CHECK(std::string(e.what()) == "/name: must be a non-empty string");
  }
}

TEST_CASE("profile files: parse, load, and their errors", "[profile]") {
  CHECK_THROWS_AS(profile::parse("{ not json"), profile_error);
  try {
    profile::parse("[1,");
  } catch (const profile_error& e) {
    CHECK(e.path().empty());
  }
  std::string path = (std::filesystem::temp_directory_path() /
                      ("vidline-profile-" + std::to_string(::getpid()) + ".json")).string();
  {
    auto j = reference_json();
    j["name"] = "from-file";
    j["pools"]["t10x8"]["sampling"][0]["warm"]["s"] = 60.0;
    std::ofstream(path) << j.dump(2);
  }
  auto p = profile::load(path);
  CHECK(p.name() == "from-file");
  CHECK(p.sampling("t10x8", {416, 736, 5}, model_state::warm).s == Approx(60.0));
  {
    auto j = reference_json();
    j["version"] = 7;
    std::ofstream(path) << j.dump();
  }
  try {
    profile::load(path);
    FAIL("accepted version 7");
  } catch (const profile_error& e) {
    CHECK(e.path() == "/version");
    CHECK_THAT(e.what(), Catch::Contains(path));
  }
  std::remove(path.c_str());
  CHECK_THROWS_WITH(profile::load(path), Catch::Contains(path));
}

TEST_CASE("one name per card kind: the profile's kinds are the names derived from the models", "[profile]") {
  // The reference line's cards, as their models derive (config::default_profile_key).
  namespace cfg = vidline::config;
  auto p = profile::reference();
  CHECK(p.has_pool(cfg::default_profile_key("Tesla T10", 8)));
  CHECK(p.has_pool(cfg::default_profile_key("Tesla T10", 4)));
  CHECK(p.has_pool(cfg::default_profile_key("AMD Radeon RX 7900 XTX", 1)));
  CHECK(p.has_encoder(cfg::default_profile_key("Tesla T10", 4)));
  CHECK(p.has_encoder(cfg::default_profile_key("Tesla T10", 1)));
  CHECK(p.has_encoder(cfg::default_profile_key("RX 7900 XTX", 1)));
  CHECK(p.has_decoder(cfg::default_profile_key("RTX 3080 Ti", 1)));
  CHECK(p.has_decoder(cfg::default_profile_key("Tesla T10", 1)));
  CHECK(p.old_names().empty());
  for (const auto& r : renamed_kinds()) {
    CHECK_FALSE(p.has_pool(r.old_name));
    CHECK_FALSE(p.has_encoder(r.old_name));
    CHECK_FALSE(p.has_decoder(r.old_name));
  }
}

TEST_CASE("a kind's old name is read as its current one", "[profile]") {
  CHECK(current_kind("xtx") == "rx7900xtx");
  CHECK(current_kind("xtxx4") == "rx7900xtxx4");  // four of them in one pool
  CHECK(current_kind("rx7900xtx") == "rx7900xtx");
  CHECK(current_kind("t10x8") == "t10x8");
  CHECK(current_kind("xtxx") == "xtxx");          // not a count
  CHECK(current_kind("xtx2") == "xtx2");
  CHECK(current_kind("") == "");
  CHECK_FALSE(renamed("rx7900xtx"));

  // A profile file written before the rename: its XTX entries load under the new name,
  // noted where they were.
  json j = reference_json();
  j["pools"]["xtx"] = j["pools"]["rx7900xtx"];
  j["pools"].erase("rx7900xtx");
  j["encoders"]["xtx"] = j["encoders"]["rx7900xtx"];
  j["encoders"].erase("rx7900xtx");
  auto old = profile::from_json(j);
  CHECK(old.has_pool("rx7900xtx"));
  CHECK_FALSE(old.has_pool("xtx"));
  CHECK(old.sampling("rx7900xtx", {416, 736, 5}, model_state::warm).s == Approx(66.382));
  CHECK(old.conditioning("rx7900xtx").s == Approx(27));
  REQUIRE(old.old_names().size() == 2);
  CHECK(old.old_names()[0].path == "/pools/xtx");
  CHECK(old.old_names()[0].kind == "rx7900xtx");
  CHECK(old.old_names()[1].path == "/encoders/xtx");

  // Both names in one table: two entries for one kind, refused naming both.
  json both = reference_json();
  both["pools"]["xtx"] = both["pools"]["rx7900xtx"];
  try {
    profile::from_json(both);
    FAIL("accepted a kind under both its names");
  } catch (const profile_error& e) {
    CHECK(e.path() == "/pools/xtx");
    CHECK_THAT(e.message(), Catch::Contains("'xtx' and 'rx7900xtx' name one kind"));
  }
  // A scaled decoder naming its base by an old name finds it under the new one.
  json scaled = reference_json();
  scaled["decoders"]["rx7900xtx"] = scaled["decoders"]["rtx3080ti"];
  scaled["decoders"]["t10"]["scale_of"]["decoder"] = "xtx";
  auto sp = profile::from_json(scaled);
  CHECK(sp.decode("t10", {416, 736, 5}).s
        == Approx(sp.decode("rx7900xtx", {416, 736, 5}).s * 2.2932));
}
