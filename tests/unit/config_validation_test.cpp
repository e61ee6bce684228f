/// The config loader: the examples load, every broken config is refused with an error
/// naming the offending field, and what to_json writes parses back to the same config.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace cfg = vidline::config;
using json = nlohmann::json;

namespace {

const std::string examples_dir = VIDLINE_SOURCE_DIR "/config/examples";

json example_json(const std::string& name) {
  std::ifstream in(examples_dir + "/" + name);
  REQUIRE(in);
  return json::parse(in);
}

/// The config_error that parsing `text` raises. Fails the test when it parses, and lets
/// any other exception fail it too.
cfg::config_error error_of(const std::string& text) {
  try {
    cfg::parse(text, "/tmp/vidline-config-test");
  } catch (const cfg::config_error& e) {
    return e;
  }
  FAIL("the config was accepted");
  throw std::logic_error("unreachable");
}

void set(json& j, const std::string& pointer, json value) {
  j[json::json_pointer(pointer)] = std::move(value);
}

void erase(json& j, const std::string& pointer) {
  const json::json_pointer p(pointer);
  json& parent = j[p.parent_pointer()];
  if (parent.is_array())
    parent.erase(std::stoul(p.back()));
  else
    parent.erase(p.back());
}

json t10_decoder() {
  return {{"name", "t10"}, {"host", "host_a"}, {"gpu", "t10-0"}, {"backend", "sim"}};
}

/// One way to break the reference config, and the error it must cause.
struct broken_case {
  const char* what;
  std::function<void(json&)> mutate;
  const char* path;
  const char* word;  ///< a word the message must contain
};

const std::vector<broken_case>& broken_cases() {
  static const std::vector<broken_case> cases{
      // unknown keys, anywhere
      {"unknown top-level key", [](json& j) { j["knob"] = json::object(); }, "/knob",
       "did you mean 'knobs'"},
      {"unknown host key", [](json& j) { set(j, "/hosts/0/adress", "x"); }, "/hosts/0/adress",
       "did you mean 'address'"},
      {"unknown gpu key", [](json& j) { set(j, "/hosts/1/gpus/1/memory", 24); },
       "/hosts/1/gpus/1/memory", "unknown key 'memory'"},
      {"unknown mode key", [](json& j) { set(j, "/modes/eight_xtx_plus_one/decoder", json::array()); },
       "/modes/eight_xtx_plus_one/decoder", "did you mean 'decoders'"},
      {"unknown knob", [](json& j) { set(j, "/knobs/heartbeat_interval", 500); },
       "/knobs/heartbeat_interval", "did you mean 'heartbeat_interval_ms'"},
      {"unknown restart policy key", [](json& j) { set(j, "/knobs/pool_restarts/max_retries", 2); },
       "/knobs/pool_restarts/max_retries", "did you mean 'max_restarts'"},
      // missing fields
      {"missing port", [](json& j) { erase(j, "/hosts/1/port"); }, "/hosts/1/port", "missing"},
      {"missing modes", [](json& j) { j.erase("modes"); }, "/modes", "missing"},
      {"missing pool backend", [](json& j) { erase(j, "/pools/2/backend"); }, "/pools/2/backend",
       "missing"},
      // wrong types
      {"port as string", [](json& j) { set(j, "/hosts/0/port", "7601"); }, "/hosts/0/port",
       "expected integer, got string"},
      {"gpus not an array", [](json& j) { set(j, "/pools/0/gpus", "t10-0"); }, "/pools/0/gpus",
       "expected array"},
      {"memory as string", [](json& j) { set(j, "/hosts/0/gpus/3/memory_gib", "16"); },
       "/hosts/0/gpus/3/memory_gib", "expected number"},
      {"fractional knob", [](json& j) { set(j, "/knobs/heartbeat_interval_ms", 1.5); },
       "/knobs/heartbeat_interval_ms", "expected integer"},
      {"modes as array", [](json& j) { j["modes"] = json::array(); }, "/modes", "expected object"},
      {"options not an object", [](json& j) { set(j, "/backends/sim/options", 5); },
       "/backends/sim/options", "expected object"},
      // names
      {"empty pool name", [](json& j) { set(j, "/pools/0/name", ""); }, "/pools/0/name", "empty"},
      {"name with a slash", [](json& j) { set(j, "/pools/0/name", "a/b"); }, "/pools/0/name",
       "characters"},
      {"empty profile", [](json& j) { set(j, "/pools/0/profile", ""); }, "/pools/0/profile",
       "empty"},
      {"duplicate host", [](json& j) { set(j, "/hosts/1/name", "host_a"); }, "/hosts/1/name",
       "duplicate host"},
      {"duplicate gpu id", [](json& j) { set(j, "/hosts/0/gpus/1/id", "t10-0"); },
       "/hosts/0/gpus/1/id", "duplicate GPU"},
      {"duplicate pool", [](json& j) { set(j, "/pools/2/name", "four_a"); }, "/pools/2/name",
       "duplicate pool"},
      {"duplicate decoder", [](json& j) { set(j, "/decoders/1/name", "rtx3080ti"); },
       "/decoders/1/name", "duplicate decoder"},
      {"duplicate encoder", [](json& j) { set(j, "/encoders/1/name", "encoder_a"); },
       "/encoders/1/name", "duplicate encoder"},
      {"duplicate device index", [](json& j) { set(j, "/hosts/0/gpus/5/index", 2); },
       "/hosts/0/gpus/5/index", "already GPU 't10-2'"},
      // hosts
      {"port 0", [](json& j) { set(j, "/hosts/0/port", 0); }, "/hosts/0/port",
       "between 1 and 65535"},
      {"port 70000", [](json& j) { set(j, "/hosts/1/port", 70000); }, "/hosts/1/port",
       "between 1 and 65535"},
      {"same address:port", [](json& j) { set(j, "/hosts/1/port", 7601); }, "/hosts/1/port",
       "same address:port"},
      {"bulk_port 0", [](json& j) { set(j, "/hosts/0/bulk_port", 0); }, "/hosts/0/bulk_port",
       "between 1 and 65535"},
      {"bulk_port text", [](json& j) { set(j, "/hosts/0/bulk_port", "7701"); },
       "/hosts/0/bulk_port", "integer"},
      {"bulk_port = port", [](json& j) { set(j, "/hosts/0/bulk_port", 7601); },
       "/hosts/0/bulk_port", "must differ from port"},
      {"bulk_port = another host's port", [](json& j) { set(j, "/hosts/0/bulk_port", 7602); },
       "/hosts/1/port", "same address:port 127.0.0.1:7602 as host 'host_a'"},
      {"same data_dir on one address", [](json& j) { set(j, "/hosts/1/data_dir", "data/host_a/"); },
       "/hosts/1/data_dir", "same data_dir"},
      {"collect_dir empty", [](json& j) { set(j, "/hosts/0/collect_dir", ""); },
       "/hosts/0/collect_dir", "must name a folder"},
      {"collect_dir not text", [](json& j) { set(j, "/hosts/0/collect_dir", 3); },
       "/hosts/0/collect_dir", "string"},
      {"collect_dir inside data_dir", [](json& j) { set(j, "/hosts/0/collect_dir", "data/host_a/videos"); },
       "/hosts/0/collect_dir", "must be outside the host's data_dir"},
      {"address with scheme", [](json& j) { set(j, "/hosts/0/address", "tcp://127.0.0.1"); },
       "/hosts/0/address", "without scheme"},
      {"address with a port (once probed as 127.0.0.1:46011:46011)",
       [](json& j) { set(j, "/hosts/0/address", "127.0.0.1:46011"); }, "/hosts/0/address",
       "host 'host_a' has address '127.0.0.1:46011', which carries a port (46011): give the "
       "address alone ('127.0.0.1'); ports are configured separately"},
      {"DNS name with a port", [](json& j) { set(j, "/hosts/1/address", "node-b.lan:7602"); },
       "/hosts/1/address", "host 'host_b' has address 'node-b.lan:7602', which carries a port"},
      {"bracketed IPv6 with a port", [](json& j) { set(j, "/hosts/1/address", "[::1]:7602"); },
       "/hosts/1/address", "carries a port (7602): give the address alone ('[::1]')"},
      {"colon in a name", [](json& j) { set(j, "/hosts/1/address", "a:b"); }, "/hosts/1/address",
       "a ':' belongs only in an IPv6 address"},
      {"unknown vendor", [](json& j) { set(j, "/hosts/0/gpus/0/vendor", "nvidea"); },
       "/hosts/0/gpus/0/vendor", "did you mean 'nvidia'"},
      {"zero memory", [](json& j) { set(j, "/hosts/1/gpus/0/memory_gib", 0); },
       "/hosts/1/gpus/0/memory_gib", "more than 0"},
      {"unknown coordinator", [](json& j) { j["coordinator"] = "host_c"; }, "/coordinator",
       "unknown host 'host_c'"},
      // references
      {"pool on unknown host", [](json& j) { set(j, "/pools/1/host", "host_c"); }, "/pools/1/host",
       "unknown host 'host_c'"},
      {"pool GPU not on its host", [](json& j) { set(j, "/pools/3/gpus/0", "t10-0"); },
       "/pools/3/gpus/0", "unknown GPU 't10-0' on host 'host_b'"},
      {"GPU twice in one pool", [](json& j) { set(j, "/pools/1/gpus/3", "t10-0"); },
       "/pools/1/gpus/3", "duplicate GPU"},
      {"decoder GPU not on its host", [](json& j) { set(j, "/decoders/0/gpu", "t10-0"); },
       "/decoders/0/gpu", "unknown GPU"},
      {"unknown backend", [](json& j) { set(j, "/pools/0/backend", "simm"); }, "/pools/0/backend",
       "unknown backend 'simm' (did you mean 'sim'?)"},
      {"pool host without encoder", [](json& j) { erase(j, "/encoders/1"); }, "/pools/3/host",
       "no encoder"},
      {"two encoders on one host",
       [](json& j) {
         json e = j["encoders"][0];
         e["name"] = "encoder_c";
         j["encoders"].push_back(e);
       },
       "/encoders/2/host", "at most one"},
      {"mixed models without profile",
       [](json& j) {
         j["pools"].push_back({{"name", "both"}, {"host", "host_b"},
                               {"gpus", {"rtx3080ti", "xtx"}}, {"backend", "sim"}});
       },
       "/pools/4/profile", "missing"},
      {"mixed vendors in a pool",
       [](json& j) {
         j["pools"].push_back({{"name", "both"}, {"host", "host_b"}, {"gpus", {"rtx3080ti", "xtx"}},
                               {"backend", "sim"}, {"profile", "mixed"}});
       },
       "/pools/4/gpus/1", "share a vendor"},
      // modes
      {"GPU in two pools of one mode", [](json& j) { set(j, "/pools/2/gpus/0", "t10-3"); },
       "/modes/four_four_plus_one/pools/1", "also uses"},
      {"decoder on a pool GPU of its mode",
       [](json& j) {
         j["decoders"].push_back(t10_decoder());
         set(j, "/modes/single_eight_plus_one/decoders", {"t10"});
       },
       "/modes/single_eight_plus_one/decoders/0", "also uses"},
      {"mode with unknown pool", [](json& j) { set(j, "/modes/eight_xtx_plus_one/pools/1", "xtxx"); },
       "/modes/eight_xtx_plus_one/pools/1", "unknown pool 'xtxx'"},
      {"mode with unknown decoder",
       [](json& j) { set(j, "/modes/eight_xtx_plus_one/decoders/0", "rtx3090"); },
       "/modes/eight_xtx_plus_one/decoders/0", "unknown decoder"},
      {"mode without pools", [](json& j) { set(j, "/modes/four_four_plus_one/pools", json::array()); },
       "/modes/four_four_plus_one/pools", "at least one pool"},
      {"mode without decoders",
       [](json& j) { set(j, "/modes/four_four_plus_one/decoders", json::array()); },
       "/modes/four_four_plus_one/decoders", "at least one decoder"},
      {"no modes", [](json& j) { j["modes"] = json::object(); }, "/modes", "at least one mode"},
      {"unknown dispatch policy",
       [](json& j) { set(j, "/modes/four_four_plus_one/policy", "round_robin"); },
       "/modes/four_four_plus_one/policy", "unknown dispatch policy 'round_robin'"},
      {"dispatch policy not a string",
       [](json& j) { set(j, "/modes/four_four_plus_one/policy", 1); },
       "/modes/four_four_plus_one/policy", "expected string"},
      // backends
      {"unknown backend type", [](json& j) { set(j, "/backends/sim/type", "simulator"); },
       "/backends/sim/type", "unknown backend type"},
      {"time_scale 0", [](json& j) { set(j, "/backends/sim/time_scale", 0); },
       "/backends/sim/time_scale", "more than 0"},
      {"time_scale on exec", [](json& j) { set(j, "/backends/x", {{"type", "exec"}, {"time_scale", 1}}); },
       "/backends/x/time_scale", "only to backends of type 'sim'"},
      {"warm_start on exec", [](json& j) { set(j, "/backends/x", {{"type", "exec"}, {"warm_start", true}}); },
       "/backends/x/warm_start", "only for backends of type 'worker'"},
      {"warm_start not a boolean",
       [](json& j) { set(j, "/backends/x", {{"type", "worker"}, {"warm_start", "yes"}}); },
       "/backends/x/warm_start", "true or false"},
      // knobs
      {"heartbeat_misses 0", [](json& j) { set(j, "/knobs/heartbeat_misses", 0); },
       "/knobs/heartbeat_misses", "between 1 and"},
      {"negative interval", [](json& j) { set(j, "/knobs/status_interval_ms", -5); },
       "/knobs/status_interval_ms", "between 1 and"},
      {"chunk too small", [](json& j) { set(j, "/knobs/chunk_bytes", 1024); }, "/knobs/chunk_bytes",
       "between 4096 and 16777216"},
      {"chunk too large", [](json& j) { set(j, "/knobs/chunk_bytes", 32 << 20); },
       "/knobs/chunk_bytes", "between 4096"},
      {"frame smaller than a chunk", [](json& j) { set(j, "/knobs/max_frame_bytes", 1 << 20); },
       "/knobs/max_frame_bytes", "chunk_bytes + 64 KiB"},
      {"stall timeout negative", [](json& j) { set(j, "/knobs/stall_timeout_s", -1); },
       "/knobs/stall_timeout_s", "between 0"},
      {"sim option unknown", [](json& j) { set(j, "/backends/sim/options", {{"stepz", 6}}); },
       "/backends/sim/options/stepz", "unknown option"},
      {"sim steps 0", [](json& j) { set(j, "/backends/sim/options", {{"steps", 0}}); },
       "/backends/sim/options/steps", "from 1 to 10000"},
      {"timeout 0", [](json& j) { set(j, "/knobs/sample_timeout_s", 0); },
       "/knobs/sample_timeout_s", "more than 0"},
      {"restart period 0", [](json& j) { set(j, "/knobs/pool_restarts/period_s", 0); },
       "/knobs/pool_restarts/period_s", "more than 0"},
      {"negative restarts", [](json& j) { set(j, "/knobs/decoder_restarts", {{"max_restarts", -1}}); },
       "/knobs/decoder_restarts/max_restarts", "between 0"},
      {"reconnect max below min", [](json& j) { set(j, "/knobs/reconnect_max_ms", 50); },
       "/knobs/reconnect_max_ms", "at least reconnect_min_ms"},
      {"retry backoff ceiling below its start",
       [](json& j) { set(j, "/knobs/retry_backoff_max_ms", 500); },
       "/knobs/retry_backoff_max_ms", "at least retry_backoff_ms"},
      {"journal kept less than memory",
       [](json& j) { set(j, "/knobs/journal_keep_finished_s", 60); },
       "/knobs/journal_keep_finished_s", "at least finished_run_memory_s"},
      {"negative run memory", [](json& j) { set(j, "/knobs/finished_run_memory_s", -1); },
       "/knobs/finished_run_memory_s", "between 0 and"},
      {"negative retry backoff", [](json& j) { set(j, "/knobs/retry_backoff_ms", -1); },
       "/knobs/retry_backoff_ms", "between 0"},
      {"resend not after status", [](json& j) { set(j, "/knobs/order_resend_ms", 500); },
       "/knobs/order_resend_ms", "more than status_interval_ms"},
      {"lease not past two status reports", [](json& j) { set(j, "/knobs/lease_ms", 1000); },
       "/knobs/lease_ms", "more than 2 x status_interval_ms"},
      {"knob beyond uint32", [](json& j) { set(j, "/knobs/max_runs", 1ull << 40); },
       "/knobs/max_runs", "between 1 and 4294967295"},
      // authentication (the reference example is plaintext, all on loopback)
      {"plaintext off without keys", [](json& j) { j["plaintext"] = false; },
       "/hosts/0/public_key", "missing"},
      {"plaintext beyond loopback", [](json& j) { set(j, "/hosts/1/address", "10.0.0.2"); },
       "/plaintext", "only when every host is on loopback"},
      {"plaintext to a name like loopback", [](json& j) { set(j, "/hosts/1/address", "127.evil.example"); },
       "/plaintext", "only when every host is on loopback"},
      {"plaintext not a bool", [](json& j) { j["plaintext"] = "yes"; }, "/plaintext",
       "true or false"},
      {"public key not Z85", [](json& j) { set(j, "/hosts/0/public_key", "short"); },
       "/hosts/0/public_key", "Z85"},
      {"two hosts, one key",
       [](json& j) {
         j["plaintext"] = false;
         set(j, "/hosts/0/public_key", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
         set(j, "/hosts/1/public_key", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
       },
       "/hosts/1/public_key", "same key as host 'host_a'"},
  };
  return cases;
}

} // namespace

TEST_CASE("the reference example loads with its four modes", "[config]") {
  const cfg::cluster c = cfg::load(examples_dir + "/reference.json");
  CHECK(c.name == "reference");
  CHECK(c.coordinator == "host_a");
  CHECK(c.source_path == examples_dir + "/reference.json");
  REQUIRE(c.hosts.size() == 2);
  CHECK(c.hosts[0].data_dir == examples_dir + "/data/host_a");
  CHECK(c.hosts[1].data_dir == examples_dir + "/data/host_b");
  CHECK(c.hosts[0].gpus.size() == 8);
  CHECK(c.hosts[0].gpus[7].index == 7);

  std::vector<std::string> modes;
  for (const auto& m : c.modes)
    modes.push_back(m.name);
  CHECK(modes == std::vector<std::string>{"eight_xtx_plus_one", "four_four_plus_one",
                                          "four_four_xtx_plus_one", "single_eight_plus_one"});
  REQUIRE(c.find_mode("four_four_xtx_plus_one") != nullptr);
  CHECK(c.find_mode("four_four_xtx_plus_one")->pools ==
        std::vector<std::string>{"four_a", "four_b", "xtx"});
  for (const auto& m : c.modes) {
    CHECK(m.decoders == std::vector<std::string>{"rtx3080ti"});
    CHECK(m.policy == "in_turn");  // the default: none is named
  }

  CHECK(c.find_pool("eight")->profile_key == "t10x8");
  CHECK(c.find_pool("four_b")->profile_key == "t10x4");
  CHECK(c.find_pool("xtx")->profile_key == "rx7900xtx");
  CHECK(c.find_decoder("rtx3080ti")->profile_key == "rtx3080ti");
  CHECK(c.find_encoder_of_host("host_b")->name == "encoder_b");
  CHECK(c.find_encoder("encoder_a")->profile_key == "t10x4");
  CHECK(c.find_backend("sim")->time_scale == Approx(0.05));
  CHECK_FALSE(cfg::warm_start_of(*c.find_backend("sim")));  // only a worker warms by default
  CHECK(c.find_host("host_b")->find_gpu("xtx")->vendor == "amd");
  CHECK(c.find_host("host_c") == nullptr);
  CHECK(c.find_pool("nine") == nullptr);
  CHECK(c.knobs.heartbeat_interval_ms == 1000);
  CHECK(c.knobs.coordinator_restarts.max_restarts == 3);
}

TEST_CASE("the small example loads and derives its profile keys", "[config]") {
  const cfg::cluster c = cfg::load(examples_dir + "/two_hosts_small.json");
  CHECK(c.modes.size() == 2);
  CHECK(c.find_pool("left")->profile_key == "t10x4");
  CHECK(c.find_decoder("decoder")->profile_key == "rtx3080ti");
  CHECK(c.find_encoder_of_host("alpha")->profile_key == "t10x4");
  CHECK(c.find_backend("sim")->profile.empty());
  CHECK(c.knobs.chunk_bytes == 524288u);
  CHECK(c.knobs.decoder_restarts.period_s == Approx(60));
  CHECK(c.knobs.pool_restarts.max_restarts == 5);  // not in the file: the default
}

TEST_CASE("broken configs are refused naming the field", "[config]") {
  const json reference = example_json("reference.json");
  REQUIRE_NOTHROW(cfg::parse(reference.dump(), examples_dir));
  for (const auto& c : broken_cases()) {
    INFO("case: " << c.what);
    json j = reference;
    c.mutate(j);
    const cfg::config_error e = error_of(j.dump());
    CHECK(e.path() == c.path);
    CHECK_THAT(e.message(), Catch::Contains(c.word));
    CHECK(std::string(e.what()) == std::string(c.path) + ": " + e.message());
  }
}

TEST_CASE("text that is not a config is refused", "[config]") {
  SECTION("invalid JSON names line and column") {
    const cfg::config_error e = error_of("{\n  \"cluster\": \"x\",\n  \"hosts\": [,]\n}");
    CHECK(e.path().empty());
    CHECK_THAT(e.message(), Catch::Contains("invalid JSON") && Catch::Contains("line 3"));
    CHECK(std::string(e.what()) == e.message());
  }
  SECTION("the document must be an object") {
    const cfg::config_error e = error_of("[]");
    CHECK(e.path().empty());
    CHECK_THAT(e.message(), Catch::Contains("expected object, got array"));
  }
  SECTION("duplicate keys are refused, not silently merged") {
    CHECK(error_of(R"({"cluster": "a", "cluster": "b"})").path() == "/cluster");
    CHECK(error_of(R"({"a": [[1, {"x": 1}], {"x": 1, "x": 2}]})").path() == "/a/1/x");
    std::string text = example_json("reference.json").dump();
    const std::string mode = "\"single_eight_plus_one\"";
    text.replace(text.find(mode), mode.size(), "\"four_four_plus_one\"");
    const cfg::config_error e = error_of(text);
    CHECK(e.path() == "/modes/four_four_plus_one");
    CHECK_THAT(e.message(), Catch::Contains("duplicate key"));
  }
}

TEST_CASE("load errors name the file", "[config]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("vidline-config-test-" +
                                                     std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  const auto load_error = [](const std::string& file) {
    try {
      cfg::load(file);
    } catch (const cfg::config_error& e) {
      return e;
    }
    FAIL("loaded " << file);
    throw std::logic_error("unreachable");
  };

  const std::string missing = (dir / "missing.json").string();
  cfg::config_error e = load_error(missing);
  CHECK(e.path().empty());
  CHECK_THAT(e.message(), Catch::Contains(missing) &&
                                  Catch::Contains("no such file", Catch::CaseSensitive::No));

  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\"cluster\": }";
  e = load_error(bad);
  CHECK(e.path().empty());
  CHECK_THAT(e.message(), Catch::Contains(bad) && Catch::Contains("line 1, column 13"));

  e = load_error(dir.string());
  CHECK_THAT(e.message(), Catch::Contains("not a regular file"));
  fs::remove_all(dir);
}

TEST_CASE("to_json round-trips through parse", "[config]") {
  for (const char* name : {"reference.json", "two_hosts_small.json"}) {
    INFO(name);
    const cfg::cluster c = cfg::load(examples_dir + "/" + name);
    const json written = cfg::to_json(c);
    const cfg::cluster again = cfg::parse(written.dump(2), "/elsewhere");
    CHECK(cfg::to_json(again) == written);
    CHECK(again.hosts[0].data_dir == c.hosts[0].data_dir);
    CHECK(again.modes.size() == c.modes.size());
  }
}

TEST_CASE("a host's bulk_port is read and written, absent means none", "[config]") {
  json j = example_json("reference.json");
  CHECK(cfg::parse(j.dump(), examples_dir).hosts[0].bulk_port == 0);
  CHECK_FALSE(cfg::to_json(cfg::parse(j.dump(), examples_dir))["hosts"][0].contains("bulk_port"));
  j["hosts"][0]["bulk_port"] = 7701;
  const cfg::cluster c = cfg::parse(j.dump(), examples_dir);
  CHECK(c.hosts[0].bulk_port == 7701);
  CHECK(c.hosts[1].bulk_port == 0);
  CHECK(cfg::to_json(c)["hosts"][0]["bulk_port"] == 7701);
}

TEST_CASE("a host's collect_dir resolves against the config's folder, absent means none", "[config]") {
  json j = example_json("reference.json");
  CHECK(cfg::parse(j.dump(), examples_dir).hosts[0].collect_dir.empty());
  CHECK_FALSE(cfg::to_json(cfg::parse(j.dump(), examples_dir))["hosts"][0].contains("collect_dir"));
  j["hosts"][1]["collect_dir"] = "videos/episode";
  const cfg::cluster c = cfg::parse(j.dump(), examples_dir);
  CHECK(c.hosts[1].collect_dir == std::string(examples_dir) + "/videos/episode");
  CHECK(c.hosts[0].collect_dir.empty());
  CHECK(cfg::parse(cfg::to_json(c).dump(), examples_dir).hosts[1].collect_dir == c.hosts[1].collect_dir);
}

TEST_CASE("a backend's warm_start is read and written, absent means on for a worker only", "[config]") {
  json j = example_json("reference.json");
  set(j, "/backends/w", {{"type", "worker"}, {"options", {{"argv", {"/bin/true"}}}}});
  set(j, "/backends/cold", {{"type", "worker"}, {"warm_start", false}});
  set(j, "/backends/e", {{"type", "exec"}, {"warm_start", false}});
  const cfg::cluster c = cfg::parse(j.dump(), examples_dir);
  CHECK(cfg::warm_start_of(*c.find_backend("w")));
  CHECK_FALSE(c.find_backend("w")->warm_start.has_value());
  CHECK_FALSE(cfg::warm_start_of(*c.find_backend("cold")));
  CHECK_FALSE(cfg::warm_start_of(*c.find_backend("e")));
  const json written = cfg::to_json(c);
  CHECK_FALSE(written["backends"]["w"].contains("warm_start"));
  CHECK(written["backends"]["cold"]["warm_start"] == false);
  CHECK_FALSE(cfg::warm_start_of(*cfg::parse(written.dump(), examples_dir).find_backend("cold")));
}

TEST_CASE("a mode's dispatch policy is read and written", "[config]") {
  json j = example_json("reference.json");
  set(j, "/modes/four_four_plus_one/policy", "first_free");
  set(j, "/modes/eight_xtx_plus_one/policy", "auto");
  const cfg::cluster c = cfg::parse(j.dump(), examples_dir);
  CHECK(c.find_mode("four_four_plus_one")->policy == "first_free");
  CHECK(c.find_mode("eight_xtx_plus_one")->policy == "auto");
  CHECK(c.find_mode("single_eight_plus_one")->policy == "in_turn");
  const json written = cfg::to_json(c);
  CHECK(written["modes"]["eight_xtx_plus_one"]["policy"] == "auto");
  CHECK(cfg::parse(written.dump(), examples_dir).find_mode("four_four_plus_one")->policy ==
        "first_free");
}

TEST_CASE("profile keys default from the GPU model and count", "[config]") {
  CHECK(cfg::default_profile_key("Tesla T10", 8) == "t10x8");
  CHECK(cfg::default_profile_key("Tesla T10", 1) == "t10");
  CHECK(cfg::default_profile_key("RTX 3080 Ti", 1) == "rtx3080ti");
  CHECK(cfg::default_profile_key("NVIDIA GeForce RTX 4090", 2) == "rtx4090x2");
  CHECK(cfg::default_profile_key("AMD Radeon RX 7900 XTX", 1) == "rx7900xtx");
  CHECK(cfg::default_profile_key("", 4).empty());

  json j = example_json("reference.json");
  for (auto& p : j["pools"])
    p.erase("profile");
  j["decoders"][0].erase("profile");
  const cfg::cluster c = cfg::parse(j.dump(), examples_dir);
  CHECK(c.find_pool("eight")->profile_key == "t10x8");
  CHECK(c.find_pool("four_a")->profile_key == "t10x4");
  CHECK(c.find_pool("xtx")->profile_key == "rx7900xtx");
  CHECK(c.find_decoder("rtx3080ti")->profile_key == "rtx3080ti");
}

TEST_CASE("one name per card kind: a profile left out is the one the reference example writes", "[config]") {
  // Every pool, decoder and encoder of the reference example names the kind its GPUs
  // derive: leaving "profile" out changes nothing, digest included.
  json j = example_json("reference.json");
  const cfg::cluster written = cfg::parse(j.dump(), examples_dir);
  for (const char* list : {"pools", "decoders", "encoders"})
    for (auto& e : j[list])
      e.erase("profile");
  const cfg::cluster derived = cfg::parse(j.dump(), examples_dir);
  for (std::size_t i = 0; i < written.pools.size(); ++i)
    CHECK(derived.pools[i].profile_key == written.pools[i].profile_key);
  for (std::size_t i = 0; i < written.decoders.size(); ++i)
    CHECK(derived.decoders[i].profile_key == written.decoders[i].profile_key);
  for (std::size_t i = 0; i < written.encoders.size(); ++i)
    CHECK(derived.encoders[i].profile_key == written.encoders[i].profile_key);
  CHECK(cfg::digest(derived) == cfg::digest(written));
  CHECK(written.old_profile_keys.empty());
}

TEST_CASE("a profile key written with a kind's old name loads as the current name, noted", "[config]") {
  json j = example_json("reference.json");
  for (auto& p : j["pools"])
    if (p["name"] == "xtx")
      p["profile"] = "xtx";
  j["encoders"][1]["profile"] = "xtx";
  const cfg::cluster c = cfg::parse(j.dump(), examples_dir);
  CHECK(c.find_pool("xtx")->profile_key == "rx7900xtx");
  CHECK(c.find_encoder("encoder_b")->profile_key == "rx7900xtx");
  REQUIRE(c.old_profile_keys.size() == 2);
  CHECK(c.old_profile_keys[0].path == "/pools/3/profile");
  CHECK(c.old_profile_keys[0].written == "xtx");
  CHECK(c.old_profile_keys[0].kind == "rx7900xtx");
  CHECK(c.old_profile_keys[1].path == "/encoders/1/profile");
  // Written back under the current name: the same config as the example's, to every peer.
  CHECK(cfg::to_json(c)["pools"][3]["profile"] == "rx7900xtx");
  CHECK(cfg::digest(c) == cfg::digest(cfg::parse(example_json("reference.json").dump(), examples_dir)));
}

TEST_CASE("knobs read, write and validate by name", "[config]") {
  const cfg::knobs defaults;
  REQUIRE_NOTHROW(cfg::validate(defaults));
  const json written = cfg::to_json(defaults);
  CHECK(written.size() == 46);  // every knob: retentions, budget, lease, gpu_*, model_wait_s, the checkpoint, preemption and stall knobs included
  CHECK(written["pool_restarts"] == json{{"max_restarts", 5}, {"period_s", 30.0}});
  CHECK(cfg::to_json(cfg::knobs_from_json(json::object())) == written);

  cfg::knobs k;
  k.chunk_bytes = 64 << 10;
  k.heartbeat_misses = 5;
  k.coordinator_restarts = {7, 12.5};
  CHECK(cfg::to_json(cfg::knobs_from_json(cfg::to_json(k))) == cfg::to_json(k));

  k.max_frame_bytes = 100 << 10;  // < chunk_bytes + 64 KiB
  try {
    cfg::validate(k);
    FAIL("accepted max_frame_bytes below chunk_bytes + 64 KiB");
  } catch (const cfg::config_error& e) {
    CHECK(e.path() == "/knobs/max_frame_bytes");
  }
}

TEST_CASE("validate holds a cluster built in code to the same rules", "[config]") {
  cfg::cluster c = cfg::load(examples_dir + "/reference.json");
  REQUIRE_NOTHROW(cfg::validate(c));
  c.pools[1].host = "host_c";
  try {
    cfg::validate(c);
    FAIL("accepted a pool on an unknown host");
  } catch (const cfg::config_error& e) {
    CHECK(e.path() == "/pools/1/host");
  }
}

TEST_CASE("random damage to a config raises only config_error", "[config]") {
  const json reference = example_json("reference.json");
  std::vector<std::string> pointers;
  const std::function<void(const json&, const std::string&)> collect =
      [&](const json& j, const std::string& at) {
        pointers.push_back(at);
        if (j.is_object())
          for (const auto& item : j.items())
            collect(item.value(), at + "/" + item.key());
        else if (j.is_array())
          for (std::size_t i = 0; i < j.size(); ++i)
            collect(j[i], at + "/" + std::to_string(i));
      };
  collect(reference, "");
  const std::vector<json> values{nullptr, true, -1, 0, 70000, 1.5, 1e300, "", "x", "t10-0",
                                 json::array(), json::object(), json{"x"}};
  const auto seed = static_cast<uint32_t>(std::random_device{}());
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 3000; ++round) {
    json j = reference;
    const std::string at = pointers[rng() % pointers.size()];
    if (!at.empty() && rng() % 4 == 0)
      erase(j, at);
    else
      j[json::json_pointer(at)] = values[rng() % values.size()];
    INFO("round " << round << ": " << at);
    try {
      cfg::parse(j.dump(), "/tmp");
    } catch (const cfg::config_error& e) {
      CHECK((e.path().empty() || e.path().front() == '/'));
    }
  }
}

TEST_CASE("a host address that carries a port is refused with keys too, bare IPv6 is not",
          "[config]") {
  // With CURVE keys (not plaintext) the same check holds: "127.0.0.1:46011" is not an address.
  json j = example_json("reference.json");
  j["plaintext"] = false;
  set(j, "/hosts/0/public_key", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
  set(j, "/hosts/1/public_key", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID");
  set(j, "/hosts/1/address", "10.0.0.2");
  REQUIRE_NOTHROW(cfg::parse(j.dump(), "/tmp/vidline-config-test"));
  set(j, "/hosts/1/address", "10.0.0.2:46011");
  auto e = error_of(j.dump());
  CHECK(e.path() == "/hosts/1/address");
  CHECK_THAT(e.message(), Catch::Contains("host 'host_b'") &&
                            Catch::Contains("ports are configured separately"));
  for (const char* ok : {"::1", "fe80::2", "[::1]", "2001:db8::7601", "node-b.lan", "10.0.0.2"}) {
    set(j, "/hosts/1/address", ok);
    INFO(ok);
    CHECK_NOTHROW(cfg::parse(j.dump(), "/tmp/vidline-config-test"));
  }
}
