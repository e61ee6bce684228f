// `vidline preflight` looks at the cards a mode uses as the node reads them, here through
// the fake NVML (tests/support/fake_nvml): a card the driver does not list is missing, a
// card holding more than gpu_foreign_memory_gib of another program's memory is refused
// naming the card and the process; a vidline node's own memory does not count.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <unistd.h>

#include "tests/support/cluster.hpp"

using namespace testing_support;

namespace {

const std::string programs = std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/";

json nvidia(const std::string& id, int index) {
  return {{"id", id}, {"model", "Fake GPU"}, {"vendor", "nvidia"}, {"memory_gib", 16},
          {"index", index}};
}

/// One host, an exec backend (the sim programs: no GPU work, but a real backend, so its
/// cards are checked), three NVIDIA cards: a pool on g0 and g1, a decoder on g2.
std::string write_config(const std::string& dir) {
  json exec = {{"type", "exec"},
               {"options",
                {{"sample", {{"argv", {programs + "sim_latent.sh", "{seed}", "{width}", "{height}",
                                       "{seconds}", "{output}"}}}},
                 {"decode", {{"argv", {programs + "sim_video.sh", "{latent}", "{latent_sha256}",
                                       "{seed}", "{width}", "{height}", "{seconds}",
                                       "{output}"}}}}}}};
  json cfg = {{"cluster", "gpu_preflight"},
              {"coordinator", "alpha"},
              {"hosts", {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", free_ports(1)[0]},
                          {"data_dir", dir + "/alpha"},
                          {"gpus", {nvidia("g0", 0), nvidia("g1", 1), nvidia("g2", 2)}}}}},
              {"backends", {{"programs", exec}}},
              {"pools", {{{"name", "p"}, {"host", "alpha"}, {"gpus", {"g0", "g1"}},
                          {"backend", "programs"}, {"profile", "cpux2"}}}},
              {"decoders", {{{"name", "d"}, {"host", "alpha"}, {"gpu", "g2"},
                             {"backend", "programs"}, {"profile", "cpu"}}}},
              {"encoders", {{{"name", "e"}, {"host", "alpha"}, {"gpus", {"g0"}},
                             {"backend", "programs"}, {"profile", "cpu"}}}},
              {"modes", {{"m", {{"pools", {"p"}}, {"decoders", {"d"}}}}}},
              {"knobs", {{"heartbeat_interval_ms", 300}}}};
  add_keys(cfg, dir);
  std::ofstream(dir + "/cluster.json") << cfg.dump(2);
  return dir + "/cluster.json";
}

void write_cards(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  REQUIRE(std::rename((path + ".tmp").c_str(), path.c_str()) == 0);
}

/// `vidline preflight --json` for host alpha; the report.
json preflight(const std::string& dir, const std::string& config) {
  static int n = 0;
  process p({VIDLINE_BINARY, "preflight", "--config", config, "--mode", "m", "--host", "alpha",
             "--timeout", "1", "--json"},
            dir + "/preflight." + std::to_string(++n) + ".out");
  REQUIRE(p.wait(60) >= 0);
  INFO(p.out() << p.err());
  return json::parse(p.out());
}

/// The check named `name` of a report (null when there is none).
json check(const json& report, const std::string& name) {
  for (auto& c : report["checks"])
    if (c["name"] == name)
      return c;
  return nullptr;
}

} // namespace

TEST_CASE("preflight refuses a missing card and one full of another program's memory") {
  temp_dir dir{"vl-gpu-preflight"};
  auto config = write_config(dir.path());
  const std::string cards = dir.path() + "/nvml.txt";
  write_cards(cards, "count 3\n");
  ::setenv("VIDLINE_NVML_LIBRARY", FAKE_NVML, 1);
  ::setenv("VIDLINE_FAKE_NVML", cards.c_str(), 1);
  // A vidline node (its memory on a card is the line's own) and another program.
  auto node = start_node(dir.path(), config, "alpha");
  process other({"sleep", "60"}, dir.path() + "/sleep.out");
  const std::string own = std::to_string(node->pid()), foreign = std::to_string(other.pid());

  // Two cards listed (g2 missing); g0 holds 8 GiB of the node's, g1 3 GiB of sleep's.
  write_cards(cards, "count 2\n0 memory_used_mib 9000\n0 memory_total_mib 16384\n"
                     "0 process " + own + " 8192\n1 process " + foreign + " 3072\n");
  auto r = preflight(dir.path(), config);
  INFO(r.dump(2));
  CHECK(r["ok"] == false);
  CHECK(check(r, "gpu alpha/g0").is_null());
  auto g1 = check(r, "gpu alpha/g1");
  REQUIRE(g1.is_object());
  CHECK(g1["status"] == "fail");
  const auto d1 = g1["detail"].get<std::string>();
  CHECK(d1.find("g1 (nvidia 1)") != std::string::npos);
  CHECK(d1.find("pid " + foreign + " (sleep) 3.0 GiB") != std::string::npos);
  CHECK(d1.find(own) == std::string::npos);
  CHECK(g1["fix"].get<std::string>().find("gpu_foreign_memory_gib") != std::string::npos);
  auto g2 = check(r, "gpu alpha/g2");
  REQUIRE(g2.is_object());
  CHECK(g2["status"] == "fail");
  CHECK(g2["detail"].get<std::string>().find("g2 (nvidia 2) is missing") != std::string::npos);
  CHECK(check(r, "gpus alpha").is_null());

  // Every card there, sleep's memory under the limit (1 GiB): the cards pass.
  write_cards(cards, "count 3\n0 memory_used_mib 9000\n0 memory_total_mib 16384\n"
                     "0 process " + own + " 8192\n1 process " + foreign + " 512\n");
  r = preflight(dir.path(), config);
  INFO(r.dump(2));
  auto ok = check(r, "gpus alpha");
  REQUIRE(ok.is_object());
  CHECK(ok["status"] == "ok");
  CHECK(ok["detail"].get<std::string>().find("g0 Fake GPU 0 (8.8 GiB of 16.0 GiB used)")
        != std::string::npos);
  for (auto name : {"gpu alpha/g0", "gpu alpha/g1", "gpu alpha/g2"})
    CHECK(check(r, name).is_null());

  // Without NVML the NVIDIA cards cannot be checked: refused, saying why.
  ::setenv("VIDLINE_NVML_LIBRARY", (dir.path() + "/no-such-libnvidia-ml.so").c_str(), 1);
  r = preflight(dir.path(), config);
  auto g0 = check(r, "gpu alpha/g0");
  REQUIRE(g0.is_object());
  CHECK(g0["detail"].get<std::string>().find("no NVIDIA telemetry") != std::string::npos);
  ::unsetenv("VIDLINE_NVML_LIBRARY");
  ::unsetenv("VIDLINE_FAKE_NVML");
  other.signal(SIGTERM);
  node->signal(SIGTERM);
  node->wait(20);
}
