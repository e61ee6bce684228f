// Sick cards with real node processes on loopback (the reference line, sim backend), the
// nodes reading their cards through the fake NVML (tests/support/fake_nvml): an
// uncorrectable ECC error drains the card's pools, a run's jobs go to the other pools, the
// card recovers after gpu_recover_s and its pools return; a card past its slowdown
// temperature for gpu_hot_s drains its pools too; an Xid 13 is counted and drains nothing,
// an Xid 79 drains the card's pools until gpu_recover_s passed. `vidline gpus` shows the
// figures; the jobs' energy is their cards' power over their stages.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "tests/support/cluster.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

/// The cards a fake NVML shows a node: every card at 50 C (slowdown 90 C), 100 W, 1 of 16
/// GiB used, plus the faults a test sets and the Xid events it injected (card, code; only
/// ever appended: the fake delivers each line once). Written whole and renamed into place,
/// so the node never reads half a file.
struct fake_cards {
  std::string path;
  int count = 0;
  std::map<int, std::map<std::string, double>> faults;
  std::vector<std::pair<int, int>> xids;

  void write() const {
    std::ofstream out(path + ".tmp");
    out << "count " << count << "\n";
    for (int i = 0; i < count; ++i) {
      std::map<std::string, double> v{{"temperature", 50},     {"slowdown", 90},
                                      {"power_w", 100},        {"utilization", 30},
                                      {"memory_used_mib", 1024}, {"memory_total_mib", 16384},
                                      {"ecc_uncorrected", 0}};
      if (auto f = faults.find(i); f != faults.end())
        for (auto& [k, x] : f->second)
          v[k] = x;
      for (auto& [k, x] : v)
        out << i << " " << k << " " << x << "\n";
    }
    for (auto& [card, code] : xids)
      out << card << " xid " << code << "\n";
    out.close();
    REQUIRE(std::rename((path + ".tmp").c_str(), path.c_str()) == 0);
  }
};

/// Polls `status @cluster` until `done(cluster)` holds or `seconds` pass; the last seen.
template <class Pred>
json wait_cluster(coordinator_client& cl, double seconds, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  json last;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (auto c = cl.status("@cluster", 1000)) {
        last = *c;
        if (done(last))
          return last;
      }
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // status polling pace
  }
  return last;
}

bool no_drains(const json& c) {
  return c.contains("drains") && c["drains"].empty();
}

bool drained(const json& c, const std::string& target) {
  return c.contains("drains") && c["drains"].contains(target);
}

/// A card of `vidline gpus --json` by host and gpu id (null when absent).
json card(const json& gpus, const std::string& host, const std::string& gpu) {
  for (auto& g : gpus)
    if (g["host"] == host && g["gpu"] == gpu)
      return g;
  return nullptr;
}

/// Six jobs of the mode on four_a, four_b and the XTX; seeds of their own (a job whose key
/// names an output made before is reused, not rendered).
vidline::msg::submit_run batch(const std::string& id, uint64_t seed) {
  vidline::msg::submit_run r;
  r.mode = "four_four_xtx_plus_one";
  r.prompt = "gpu drain test prompt";
  r.width = 416;
  r.height = 736;
  r.seconds = 5;
  r.count = 6;
  r.seed = seed;
  r.request_id = id;
  return r;
}

json run_to_end(coordinator_client& cl, const std::string& run_id) {
  auto st = wait_status(cl, run_id, 90, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");
  return st;
}

/// A stage's length (run-clock s) from the status: its start (conditioning's, when it
/// had one) to its end.
double stage_length(const json& j, const char* first, const char* last) {
  auto& s = j["stages"];
  double a = s[first].is_null() ? s[last]["start_s"].get<double>() : s[first]["start_s"].get<double>();
  return s[last]["end_s"].get<double>() - a;
}

} // namespace

TEST_CASE("a sick card drains its pools, jobs go elsewhere, it recovers and they return") {
  temp_dir dir{"vl-gpu-drain"};
  const json knobs = {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 3},
                      {"status_interval_ms", 100},    {"order_resend_ms", 400},
                      {"gpu_sample_interval_ms", 200}, {"gpu_hot_s", 1},
                      {"gpu_recover_s", 1}};
  auto config = write_reference_config(dir.path(), 0.005, knobs, false);
  auto cluster = vidline::config::load(config);
  // host_a: eight T10s (NVML indexes 0-7); host_b: the 3080 Ti (NVML 0) and the XTX, whose
  // amdgpu files are absent here (its figures unknown, never sick).
  fake_cards a{dir.path() + "/nvml_a.txt", 8, {}}, b{dir.path() + "/nvml_b.txt", 1, {}};
  a.write();
  b.write();
  ::setenv("VIDLINE_NVML_LIBRARY", FAKE_NVML, 1);
  ::setenv("VIDLINE_DRM_ROOT", (dir.path() + "/no-drm").c_str(), 1);
  ::setenv("VIDLINE_FAKE_NVML", a.path.c_str(), 1);
  auto na = start_node(dir.path(), config, "host_a");
  ::setenv("VIDLINE_FAKE_NVML", b.path.c_str(), 1);
  auto nb = start_node(dir.path(), config, "host_b");
  for (const char* v : {"VIDLINE_NVML_LIBRARY", "VIDLINE_DRM_ROOT", "VIDLINE_FAKE_NVML"})
    ::unsetenv(v);
  coordinator_client cl(cluster);
  REQUIRE(line_reported(cl, 60));

  auto c = wait_cluster(cl, 30, [](const json& c) {
    int ok = 0;
    for (auto& g : c.value("gpus", json::array()))
      ok += g["health"] == "ok" ? 1 : 0;
    return ok == 9;
  });
  INFO(c.dump(2));
  REQUIRE(c["gpus"].size() == 10);
  CHECK(no_drains(c));

  // An uncorrectable ECC error on t10-5: four_b and eight (its pools) are drained.
  a.faults[5] = {{"ecc_uncorrected", 2}};
  a.write();
  c = wait_cluster(cl, 20, [](const json& c) {
    return drained(c, "pool:four_b") && drained(c, "pool:eight");
  });
  INFO(c.dump(2));
  REQUIRE(drained(c, "pool:four_b"));
  CHECK(c["drains"]["pool:four_b"]["sick_gpus"] == json{"host_a/t10-5"});
  CHECK(c["drains"]["pool:four_b"]["reason"].get<std::string>().find("uncorrectable ECC")
        != std::string::npos);
  CHECK(c["pools"]["four_b"]["drained"] == true);
  CHECK_FALSE(drained(c, "pool:four_a"));
  CHECK_FALSE(drained(c, "decoder:t10_a"));  // t10-7 is well

  // `vidline gpus`: the figures, the sick card and whom it drains.
  process gpus_json({VIDLINE_BINARY, "gpus", "--config", config, "--json"},
                    dir.path() + "/gpus.json.out");
  REQUIRE(gpus_json.wait(30) == 0);
  auto gpus = json::parse(gpus_json.out());
  auto sick = card(gpus, "host_a", "t10-5");
  REQUIRE(sick.is_object());
  CHECK(sick["health"] == "sick");
  CHECK(sick["drained"] == true);
  CHECK(sick["ecc_uncorrected"] == 2);
  CHECK(sick["users"] == json{"pool:eight", "pool:four_b"});
  auto well = card(gpus, "host_a", "t10-0");
  REQUIRE(well.is_object());
  CHECK(well["source"] == "nvml");
  CHECK(well["health"] == "ok");
  CHECK(well["temperature_c"] == 50);
  CHECK(well["slowdown_c"] == 90);
  CHECK(well["power_w"] == 100);
  CHECK(well["memory_used_mib"] == 1024);
  CHECK(well["memory_total_mib"] == 16384);
  CHECK(well["utilization"] == 30);
  CHECK(well["xid_events"] == 0);  // registered for Xid events, none yet
  CHECK(well["xid_last"].is_null());
  CHECK(well["drained"] == true);  // it is eight's too
  auto decoder_card = card(gpus, "host_b", "rtx3080ti");
  REQUIRE(decoder_card.is_object());
  CHECK(decoder_card["drained"] == false);
  CHECK(decoder_card["users"] == json{"decoder:rtx3080ti"});
  auto xtx = card(gpus, "host_b", "xtx");
  REQUIRE(xtx.is_object());
  CHECK(xtx["source"] == "unknown");
  CHECK(xtx["temperature_c"].is_null());
  CHECK(xtx["xid_events"].is_null());
  process gpus_text({VIDLINE_BINARY, "gpus", "--config", config},
                    dir.path() + "/gpus.text.out");
  REQUIRE(gpus_text.wait(30) == 0);
  CHECK(gpus_text.out().find("uncorrectable ECC") != std::string::npos);
  CHECK(gpus_text.out().find("(drained)") != std::string::npos);

  // A run while four_b is drained: its jobs go to four_a and the XTX.
  auto run1 = cl.submit(batch("gpu-drain-1", 4242));
  auto st = run_to_end(cl, run1);
  INFO(st.dump(2));
  std::set<std::string> pools;
  for (auto& j : st["jobs"])
    pools.insert(j["pool"].get<std::string>());
  CHECK(pools.count("four_b") == 0);
  CHECK(pools.count("four_a") == 1);

  // The energy of each stage: its cards' power (100 W each) over the stage; the XTX's is
  // unknown (no telemetry), the 3080 Ti decodes at 100 W. A reading holds for five
  // sampling intervals at most: a node stalled longer than that counts less.
  for (auto& j : st["jobs"]) {
    INFO(j.dump(2));
    auto& e = j["energy_j"];
    const double decode = 100 * stage_length(j, "decode", "decode");
    REQUIRE(e["decode"].is_number());
    CHECK(e["decode"].get<double>() <= decode * 1.01 + 0.1);
    CHECK(e["decode"].get<double>() >= decode * 0.7);
    if (j["pool"] == "xtx") {
      CHECK(e["sampling"].is_null());
      continue;
    }
    const double sampling = 4 * 100 * stage_length(j, "conditioning", "sampling");
    REQUIRE(e["sampling"].is_number());
    CHECK(e["sampling"].get<double>() <= sampling * 1.01 + 0.1);
    CHECK(e["sampling"].get<double>() >= sampling * 0.7);
    CHECK(e["total"].get<double>()
          == Approx(e["sampling"].get<double>() + e["decode"].get<double>()).epsilon(0.001));
  }
  auto& sum = st["summary"];
  REQUIRE(sum["wh_per_clip"].is_number());
  CHECK(sum["wh_per_clip"].get<double>()
        == Approx(sum["energy_j"].get<double>() / 3600 / 6).epsilon(0.01));
  CHECK(sum["clips_per_kwh"].get<double>()
        == Approx(1000 / sum["wh_per_clip"].get<double>()).epsilon(0.01));
  process runs({VIDLINE_BINARY, "runs", "--config", config, "--json"}, dir.path() + "/runs.out");
  REQUIRE(runs.wait(30) == 0);
  auto listed = json::parse(runs.out())["runs"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["wh_per_clip"] == sum["wh_per_clip"]);

  // The error clears (a reset of the card): four_b returns after gpu_recover_s.
  a.faults.erase(5);
  a.write();
  const auto cleared = std::chrono::steady_clock::now();
  c = wait_cluster(cl, 20, [](const json& c) { return no_drains(c); });
  INFO(c.dump(2));
  REQUIRE(no_drains(c));
  CHECK(std::chrono::steady_clock::now() - cleared >= std::chrono::milliseconds(900));
  CHECK(c["pools"]["four_b"]["drained"] == false);
  auto run2 = cl.submit(batch("gpu-drain-2", 9000));
  st = run_to_end(cl, run2);
  pools.clear();
  for (auto& j : st["jobs"])
    pools.insert(j["pool"].get<std::string>());
  CHECK(pools.count("four_b") == 1);

  // t10-1 at 95 C, past its slowdown temperature: sick after gpu_hot_s, four_a drained.
  a.faults[1] = {{"temperature", 95}};
  a.write();
  const auto hot = std::chrono::steady_clock::now();
  c = wait_cluster(cl, 20, [](const json& c) { return drained(c, "pool:four_a"); });
  INFO(c.dump(2));
  REQUIRE(drained(c, "pool:four_a"));
  CHECK(std::chrono::steady_clock::now() - hot >= std::chrono::milliseconds(900));
  CHECK(c["drains"]["pool:four_a"]["reason"].get<std::string>().find("slowdown temperature")
        != std::string::npos);
  CHECK_FALSE(drained(c, "pool:four_b"));
  a.faults.erase(1);
  a.write();
  c = wait_cluster(cl, 20, [](const json& c) { return no_drains(c); });
  CHECK(no_drains(c));

  // An Xid 13 on t10-6 (an application's fault): counted and shown, nothing drained. The
  // report that shows it carries the verdict on it.
  auto xid_card = [](const json& c) {
    return card(c.value("gpus", json::array()), "host_a", "t10-6");
  };
  a.xids.push_back({6, 13});
  a.write();
  c = wait_cluster(cl, 20, [&](const json& c) {
    auto g = xid_card(c);
    return g.is_object() && g["xid_events"] == 1;
  });
  INFO(c.dump(2));
  auto g6 = xid_card(c);
  REQUIRE(g6.is_object());
  CHECK(g6["xid_events"] == 1);
  CHECK(g6["xid_last"] == 13);
  CHECK(g6["health"] == "ok");
  CHECK(no_drains(c));

  // An Xid 79 (fallen off the bus) on t10-6: four_b and eight drained at once, the reason
  // naming it; back after gpu_recover_s without another.
  a.xids.push_back({6, 79});
  a.write();
  const auto fell = std::chrono::steady_clock::now();
  c = wait_cluster(cl, 20, [](const json& c) {
    return drained(c, "pool:four_b") && drained(c, "pool:eight");
  });
  INFO(c.dump(2));
  REQUIRE(drained(c, "pool:four_b"));
  CHECK(c["drains"]["pool:four_b"]["sick_gpus"] == json{"host_a/t10-6"});
  CHECK_THAT(c["drains"]["pool:four_b"]["reason"].get<std::string>(),
             Catch::Contains("Xid 79 (fallen off the bus)"));
  CHECK_FALSE(drained(c, "pool:four_a"));
  g6 = xid_card(c);
  REQUIRE(g6.is_object());
  CHECK(g6["health"] == "sick");
  CHECK(g6["xid_events"] == 2);
  CHECK(g6["xid_last"] == 79);
  CHECK(g6["xid_last_unix_s"].is_number());
  REQUIRE(g6["xids"].size() == 2);
  CHECK(g6["xids"][0]["code"] == 13);
  CHECK(g6["xids"][1]["code"] == 79);
  CHECK(g6["xids"][1]["count"] == 1);
  // (Not its sick line: the card may be well again by the time the command asks.)
  process xid_text({VIDLINE_BINARY, "gpus", "--config", config}, dir.path() + "/gpus.xid.out");
  REQUIRE(xid_text.wait(30) == 0);
  CHECK(xid_text.out().find("Xid 13 x1, 79 x1; the last 79 at") != std::string::npos);
  c = wait_cluster(cl, 20, [](const json& c) { return no_drains(c); });
  INFO(c.dump(2));
  REQUIRE(no_drains(c));
  CHECK(std::chrono::steady_clock::now() - fell >= std::chrono::milliseconds(900));
  g6 = xid_card(c);
  CHECK(g6["health"] == "ok");
  CHECK(g6["xid_events"] == 2);  // the count stays: since the node started
}
