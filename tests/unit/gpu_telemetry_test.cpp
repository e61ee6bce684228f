// GPU telemetry (nodes/gpu/telemetry.hpp) against a fake NVML library built in the test
// tree (tests/support/fake_nvml: the same C symbols, values and faults from a file) and a
// fake amdgpu sysfs tree; then the health rule over its readings.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "actors/gpu/health.hpp"
#include "nodes/gpu/telemetry.hpp"

using namespace vidline;
namespace fs = std::filesystem;

namespace {

/// A scratch folder of its own, removed at the end.
struct scratch {
  fs::path dir;
  scratch() {
    dir = fs::temp_directory_path() / ("vidline-gpu-" + std::to_string(::getpid()) + "-"
                                       + std::to_string(std::rand()));
    fs::create_directories(dir);
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void write(const fs::path& rel, const std::string& text) const {
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel) << text;
  }
};

/// The fake NVML answers from `file`.
void cards(const scratch& s, const std::string& text) {
  s.write("nvml.txt", text);
  ::setenv("VIDLINE_FAKE_NVML", (s.dir / "nvml.txt").c_str(), 1);
}

/// Adds lines to the fake's file (an Xid event: "0 xid 79\n").
void append(const scratch& s, const std::string& text) {
  std::ofstream(s.dir / "nvml.txt", std::ios::app) << text;
}

/// The fake library held open by the test itself, so its state outlives a reader's
/// dlclose; it tells how many event sets are not freed.
struct fake_handle {
  void* h = dlopen(FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ~fake_handle() {
    if (h != nullptr)
      dlclose(h);
  }
  int event_sets_open() const {
    auto f = reinterpret_cast<int (*)()>(dlsym(h, "fake_nvml_event_sets_open"));
    REQUIRE(f != nullptr);
    return f();
  }
};

nodes::gpu::reader_options nvml_only(const char* lib) {
  nodes::gpu::reader_options o;
  o.nvml_library = lib;
  o.drm_root = "";
  return o;
}

config::gpu nvidia(const std::string& id, int index) {
  config::gpu g;
  g.id = id;
  g.vendor = "nvidia";
  g.index = index;
  return g;
}

/// Part of a sample as a node before the Xid fields packed it.
struct old_sample {
  int32_t index = 0;
  std::string id, source = "nvml";
  double temperature_c = 70;
  std::string health = "ok", health_reason;
  VIDLINE_MSGPACK_MAP(index, id, source, temperature_c, health, health_reason)
};

} // namespace

TEST_CASE("nvml: memory used as nvidia-smi shows it, the driver's reserved memory left out") {
  scratch s;
  cards(s, "count 2\n"
           "0 memory_used_mib 0\n0 memory_total_mib 81559\n0 memory_reserved_mib 480\n"
           "1 memory_used_mib 883\n1 memory_total_mib 81559\n1 memory_reserved_mib 480\n"
           "1 no_memory_v2 1\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML));
  REQUIRE(r.nvml());
  auto got = r.read({}, 1000);
  REQUIRE(got.size() == 2);
  CHECK(got[0].memory_used_mib == Approx(0));  // the v2 call: as nvidia-smi
  CHECK(got[0].memory_total_mib == Approx(81559));
  CHECK(got[1].memory_used_mib == Approx(883 + 480));  // an older driver: v1, reserved counted
}

TEST_CASE("nvml: every field read, cards the config does not name listed after those it does") {
  scratch s;
  cards(s, "count 2\n"
           "0 temperature 71\n0 slowdown 90\n0 power_w 245.5\n0 energy_j 123456.789\n"
           "0 utilization 97\n0 memory_used_mib 30000\n0 memory_total_mib 81559\n"
           "0 memory_reserved_mib 480\n0 sm_clock_mhz 1980\n0 memory_clock_mhz 2619\n0 throttle 4\n"
           "0 ecc_uncorrected 0\n0 ecc_corrected 3\n0 pcie_gen 5\n0 pcie_width 16\n"
           "0 memory_temperature 80\n0 process 4242 3072\n"
           "1 temperature 40\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML));
  REQUIRE(r.nvml());
  auto got = r.read({nvidia("h0", 1)}, 1000);
  REQUIRE(got.size() == 2);
  CHECK(got[0].id == "h0");
  CHECK(got[0].index == 1);
  CHECK(got[0].temperature_c == 40);
  CHECK(got[0].power_w == -1);  // the fake has none for card 1: unknown, not 0
  auto& g = got[1];
  CHECK(g.id.empty());
  CHECK(g.index == 0);
  CHECK(g.source == "nvml");
  CHECK(g.name == "Fake GPU 0");
  CHECK(g.uuid == "GPU-fake-0");
  CHECK(g.unix_s == 1000);
  CHECK(g.temperature_c == 71);
  CHECK(g.slowdown_c == 90);
  CHECK(g.memory_temperature_c == 80);
  CHECK(g.power_w == Approx(245.5));
  CHECK(g.energy_j == Approx(123456.789));
  CHECK(g.utilization == 97);
  CHECK(g.memory_used_mib == Approx(30000));
  CHECK(g.memory_total_mib == Approx(81559));
  CHECK(g.sm_clock_mhz == 1980);
  CHECK(g.memory_clock_mhz == 2619);
  CHECK(g.throttle_reasons == 4);
  CHECK(g.ecc_uncorrected == 0);
  CHECK(g.ecc_corrected == 3);
  CHECK(g.pcie_gen == 5);
  CHECK(g.pcie_width == 16);
  CHECK_FALSE(g.lost);
  REQUIRE(g.processes.size() == 1);
  CHECK(g.processes[0].pid == 4242);
  CHECK(g.processes[0].memory_mib == Approx(3072));
}

TEST_CASE("nvml: an older driver's missing symbols leave those fields unknown") {
  scratch s;
  cards(s, "count 1\n0 temperature 60\n0 energy_j 5\n0 memory_temperature 70\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML_OLD));
  REQUIRE(r.nvml());
  auto g = r.read_nvml(0, 0);
  CHECK(g.temperature_c == 60);
  CHECK(g.energy_j == -1);
  CHECK(g.memory_temperature_c == -1);
}

TEST_CASE("nvml absent or failing: no telemetry, never an error") {
  scratch s;
  cards(s, "count 1\n0 temperature 60\n");
  {
    nodes::gpu::reader r(nvml_only("/nonexistent/libnvidia-ml.so.1"));
    CHECK_FALSE(r.nvml());
    CHECK_THAT(r.nvml_status(), Catch::Contains("no NVML"));
    auto got = r.read({nvidia("g0", 0)}, 5);
    REQUIRE(got.size() == 1);
    CHECK(got[0].source == "unknown");
    CHECK(got[0].id == "g0");
    CHECK(got[0].temperature_c == -1);
    CHECK_FALSE(got[0].lost);
    actors::gpu::health_state h;
    CHECK_FALSE(actors::gpu::step(h, got[0], {}, 0));
    CHECK(got[0].health == "unknown");
  }
  cards(s, "count 1\ninit_fails 1\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML));
  CHECK_FALSE(r.nvml());
  CHECK_THAT(r.nvml_status(), Catch::Contains("nvmlInit_v2 failed"));
  CHECK(r.read({nvidia("g0", 0)}, 5)[0].source == "unknown");
}

TEST_CASE("nvml: a lost card and a missing one are lost, the health rule makes them sick") {
  scratch s;
  cards(s, "count 1\n0 temperature 60\n0 slowdown 90\n0 ecc_uncorrected 0\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML));
  auto got = r.read({nvidia("g0", 0), nvidia("g1", 1)}, 0);
  REQUIRE(got.size() == 2);
  CHECK_FALSE(got[0].lost);
  CHECK(got[1].lost);  // the config names card 1, the driver lists one card
  actors::gpu::health_state h0, h1;
  actors::gpu::health_params p{30, 60};
  CHECK_FALSE(actors::gpu::step(h0, got[0], p, 0));
  CHECK(actors::gpu::step(h1, got[1], p, 0));
  CHECK(got[1].health == "sick");

  // Card 0 falls off the bus; then throws an ECC error after it is back.
  cards(s, "count 1\n0 lost 1\n");
  auto g = r.read_nvml(0, 1);
  CHECK(g.lost);
  CHECK(actors::gpu::step(h0, g, p, 1));
  cards(s, "count 1\n0 temperature 60\n0 slowdown 90\n0 ecc_uncorrected 1\n");
  g = r.read_nvml(0, 2);
  CHECK_FALSE(g.lost);
  CHECK(g.ecc_uncorrected == 1);
  CHECK_FALSE(actors::gpu::step(h0, g, p, 2));  // still sick, another reason
  CHECK_THAT(g.health_reason, Catch::Contains("ECC"));
  // Hot for longer than hot_s, with the ECC cleared (a reset): still sick, then well.
  cards(s, "count 1\n0 temperature 95\n0 slowdown 90\n0 ecc_uncorrected 0\n");
  g = r.read_nvml(0, 3);
  CHECK_FALSE(actors::gpu::step(h0, g, p, 3));
  g = r.read_nvml(0, 40);
  CHECK_FALSE(actors::gpu::step(h0, g, p, 40));
  CHECK_THAT(g.health_reason, Catch::Contains("slowdown"));
  cards(s, "count 1\n0 temperature 60\n0 slowdown 90\n0 ecc_uncorrected 0\n");
  g = r.read_nvml(0, 41);
  CHECK_FALSE(actors::gpu::step(h0, g, p, 41));
  g = r.read_nvml(0, 101);
  CHECK(actors::gpu::step(h0, g, p, 101));
  CHECK(g.health == "ok");
}

TEST_CASE("nvml: Xid events counted per card by code, the newest code and when") {
  scratch s;
  cards(s, "count 2\n0 temperature 60\n1 temperature 61\n0 xid 13\n");  // before the reader
  fake_handle fake;
  REQUIRE(fake.h != nullptr);
  {
    nodes::gpu::reader r(nvml_only(FAKE_NVML));
    REQUIRE(r.nvml());
    CHECK(r.xid_status().empty());
    CHECK(fake.event_sets_open() == 1);
    auto got = r.read({nvidia("g0", 0), nvidia("g1", 1)}, 100);
    REQUIRE(got.size() == 2);
    for (auto& g : got) {  // registered, none since the node started (13 came before)
      CHECK(g.xid_events == 0);
      CHECK(g.xid_last == -1);
      CHECK(g.xid_last_unix_s == -1);
      CHECK(g.xids.empty());
    }
    // Card 1: two 13s; card 0: a 79. One reading takes them all, each to its card.
    append(s, "1 xid 13\n1 xid 13\n0 xid 79\n");
    got = r.read({nvidia("g0", 0), nvidia("g1", 1)}, 200);
    CHECK(got[0].xid_events == 1);
    CHECK(got[0].xid_last == 79);
    CHECK(got[0].xid_last_unix_s == 200);
    REQUIRE(got[0].xids.size() == 1);
    CHECK(got[0].xids[0].code == 79);
    CHECK(got[0].xids[0].count == 1);
    CHECK(got[1].xid_events == 2);
    CHECK(got[1].xid_last == 13);
    REQUIRE(got[1].xids.size() == 1);
    CHECK(got[1].xids[0].count == 2);
    // Nothing new: the figures hold (since the node started), the time of the last too.
    got = r.read({nvidia("g0", 0), nvidia("g1", 1)}, 300);
    CHECK(got[0].xid_events == 1);
    CHECK(got[0].xid_last_unix_s == 200);
    // Card 1 again with another code: both codes listed, ascending, the newest named.
    append(s, "1 xid 31\n");
    auto g = r.read_nvml(1, 400);
    CHECK(g.xid_events == 3);
    CHECK(g.xid_last == 31);
    CHECK(g.xid_last_unix_s == 400);
    REQUIRE(g.xids.size() == 2);
    CHECK(g.xids[0].code == 13);
    CHECK(g.xids[0].last_unix_s == 200);
    CHECK(g.xids[1].code == 31);
    CHECK(g.xids[1].count == 1);
  }
  CHECK(fake.event_sets_open() == 0);  // freed with the reader
}

TEST_CASE("nvml: a critical Xid read through the fake makes the card sick, a 13 does not") {
  scratch s;
  cards(s, "count 1\n0 temperature 60\n0 slowdown 90\n0 ecc_uncorrected 0\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML));
  actors::gpu::health_params p{30, 60};
  actors::gpu::health_state h;
  auto g = r.read_nvml(0, 0);
  CHECK_FALSE(actors::gpu::step(h, g, p, 0));
  append(s, "0 xid 13\n");
  g = r.read_nvml(0, 1);
  CHECK(g.xid_events == 1);
  CHECK_FALSE(actors::gpu::step(h, g, p, 1));
  CHECK(g.health == "ok");
  append(s, "0 xid 79\n");
  g = r.read_nvml(0, 2);
  CHECK(actors::gpu::step(h, g, p, 2));
  CHECK(g.health == "sick");
  CHECK_THAT(g.health_reason, Catch::Contains("Xid 79"));
}

TEST_CASE("nvml: an older driver's events come through nvmlEventSetWait") {
  scratch s;
  cards(s, "count 1\n0 temperature 60\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML_OLD));  // no nvmlEventSetWait_v2
  REQUIRE(r.nvml());
  CHECK(r.xid_status().empty());
  CHECK(r.read_nvml(0, 1).xid_events == 0);
  append(s, "0 xid 48\n");
  auto g = r.read_nvml(0, 2);
  CHECK(g.xid_events == 1);
  CHECK(g.xid_last == 48);
}

TEST_CASE("nvml: without event functions, or a card that cannot, Xid is unknown, not an error") {
  scratch s;
  cards(s, "count 2\n0 temperature 60\n1 temperature 61\n1 events_unsupported 1\n");
  {
    nodes::gpu::reader r(nvml_only(FAKE_NVML_NO_EVENTS));
    REQUIRE(r.nvml());
    CHECK_THAT(r.xid_status(), Catch::Contains("no event functions"));
    append(s, "0 xid 79\n");
    auto g = r.read_nvml(0, 1);
    CHECK(g.source == "nvml");
    CHECK(g.temperature_c == 60);  // the rest is read as ever
    CHECK_FALSE(g.lost);
    CHECK(g.xid_events == -1);
    CHECK(g.xid_last == -1);
    CHECK(g.xids.empty());
    actors::gpu::health_state h;
    CHECK_FALSE(actors::gpu::step(h, g, {}, 1));
    CHECK(g.health == "ok");
  }
  // Event functions there, card 1 NOT_SUPPORTED: unknown for it, counted for card 0.
  cards(s, "count 2\n0 temperature 60\n1 temperature 61\n1 events_unsupported 1\n");
  nodes::gpu::reader r(nvml_only(FAKE_NVML));
  CHECK(r.xid_status().empty());
  append(s, "0 xid 79\n1 xid 79\n");
  auto got = r.read({nvidia("g0", 0), nvidia("g1", 1)}, 5);
  REQUIRE(got.size() == 2);
  CHECK(got[0].xid_events == 1);
  CHECK(got[1].xid_events == -1);
  CHECK_FALSE(got[1].lost);
  CHECK(got[1].temperature_c == 61);
}

TEST_CASE("gpu_sample: an older node's frame reads as Xid unknown, an older reader skips them") {
  msgpack::sbuffer buf;
  msgpack::pack(buf, old_sample{});
  msg::gpu_sample g;
  msgpack::unpack(buf.data(), buf.size()).get().convert(g);
  CHECK(g.source == "nvml");
  CHECK(g.temperature_c == 70);
  CHECK(g.xid_events == -1);
  CHECK(g.xid_last == -1);
  CHECK(g.xid_last_unix_s == -1);
  CHECK(g.xids.empty());
  // A new sample, read by the old struct: the Xid fields are passed over.
  msg::gpu_sample n;
  n.source = "nvml";
  n.temperature_c = 71;
  n.xid_events = 2;
  n.xid_last = 79;
  n.xids = {{79, 2, 1.5}};
  msgpack::sbuffer nbuf;
  msgpack::pack(nbuf, n);
  old_sample o;
  msgpack::unpack(nbuf.data(), nbuf.size()).get().convert(o);
  CHECK(o.temperature_c == 71);
  // And round trip: every Xid field survives.
  msg::gpu_sample back;
  msgpack::unpack(nbuf.data(), nbuf.size()).get().convert(back);
  CHECK(back.xid_events == 2);
  CHECK(back.xid_last == 79);
  REQUIRE(back.xids.size() == 1);
  CHECK(back.xids[0].code == 79);
  CHECK(back.xids[0].count == 2);
  CHECK(back.xids[0].last_unix_s == 1.5);
}

TEST_CASE("amdgpu: hwmon and sysfs files read, other vendors and connectors skipped") {
  scratch s;
  const fs::path c0 = "card0/device", c1 = "card1/device";
  s.write(c0 / "vendor", "0x1002\n");
  s.write(c0 / "product_name", "Radeon RX 7900 XTX\n");
  s.write(c0 / "unique_id", "abc123\n");
  s.write(c0 / "hwmon/hwmon3/temp1_label", "edge\n");
  s.write(c0 / "hwmon/hwmon3/temp1_input", "61000\n");
  s.write(c0 / "hwmon/hwmon3/temp1_crit", "110000\n");
  s.write(c0 / "hwmon/hwmon3/temp3_label", "mem\n");
  s.write(c0 / "hwmon/hwmon3/temp3_input", "94000\n");
  s.write(c0 / "hwmon/hwmon3/power1_average", "300000000\n");
  s.write(c0 / "gpu_busy_percent", "88\n");
  s.write(c0 / "mem_info_vram_used", std::to_string(4ull << 30) + "\n");
  s.write(c0 / "mem_info_vram_total", std::to_string(24ull << 30) + "\n");
  s.write(c0 / "pp_dpm_sclk", "0: 500Mhz\n1: 2304Mhz *\n");
  s.write(c0 / "pp_dpm_mclk", "0: 96Mhz *\n1: 1250Mhz\n");
  s.write(c0 / "ras/umc_err_count", "ue: 1\nce: 7\n");
  s.write(c0 / "current_link_speed", "16.0 GT/s PCIe\n");
  s.write(c0 / "current_link_width", "16\n");
  s.write(c1 / "vendor", "0x8086\n");  // another vendor's card
  s.write("card0-DP-1/status", "connected\n");
  nodes::gpu::reader_options o;
  o.nvml_library = "";
  o.drm_root = s.dir.string();
  nodes::gpu::reader r(o);
  config::gpu xtx;
  xtx.id = "xtx";
  xtx.vendor = "amd";
  xtx.index = 0;
  config::gpu gone = xtx;
  gone.id = "xtx2";
  gone.index = 1;
  auto got = r.read({xtx, gone}, 7);
  REQUIRE(got.size() == 2);
  auto& g = got[0];
  CHECK(g.id == "xtx");
  CHECK(g.source == "amdgpu");
  CHECK(g.name == "Radeon RX 7900 XTX");
  CHECK(g.uuid == "abc123");
  CHECK(g.temperature_c == Approx(61));
  CHECK(g.slowdown_c == Approx(110));
  CHECK(g.memory_temperature_c == Approx(94));
  CHECK(g.power_w == Approx(300));
  CHECK(g.energy_j == -1);
  CHECK(g.utilization == 88);
  CHECK(g.memory_used_mib == Approx(4096));
  CHECK(g.memory_total_mib == Approx(24576));
  CHECK(g.sm_clock_mhz == 2304);
  CHECK(g.memory_clock_mhz == 96);
  CHECK(g.ecc_uncorrected == 1);
  CHECK(g.ecc_corrected == 7);
  CHECK(g.pcie_gen == 4);
  CHECK(g.pcie_width == 16);
  CHECK(got[1].id == "xtx2");
  CHECK(got[1].lost);  // the driver answers, the config's second card is not there
  actors::gpu::health_state h;
  CHECK(actors::gpu::step(h, g, {}, 0));
  CHECK_THAT(g.health_reason, Catch::Contains("1 uncorrectable ECC"));
}
