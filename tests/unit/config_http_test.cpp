/// hosts[].http (docs/config.md, "HTTP endpoint"): off by default (and the digest of a
/// config without it unchanged), a non-loopback address refused without a token file,
/// every wrong field named.
#include <catch2/catch.hpp>

#include <fstream>

#include "config/config.hpp"

namespace cfg = vidline::config;
using json = nlohmann::json;

namespace {

json reference() {
  std::ifstream in(VIDLINE_SOURCE_DIR "/config/examples/reference.json");
  REQUIRE(in);
  return json::parse(in);
}

std::string error_of(const json& doc) {
  try {
    cfg::parse(doc.dump(), "/tmp/vidline-config-test");
  } catch (const cfg::config_error& e) {
    return e.what();
  }
  FAIL("the config was accepted");
  return "";
}

} // namespace

TEST_CASE("http endpoint: off by default, read when given, in the digest only when set", "[config]") {
  auto doc = reference();
  const auto plain = cfg::parse(doc.dump(), "/tmp/x");
  CHECK(plain.hosts[0].http.port == 0);
  CHECK(plain.hosts[0].http.address == "127.0.0.1");
  CHECK(cfg::to_json(plain)["hosts"][0].count("http") == 0);
  doc["hosts"][0]["http"] = {{"port", 7680}, {"token_file", "tok"}, {"max_request_bytes", 4096}};
  const auto with = cfg::parse(doc.dump(), "/tmp/x");
  CHECK(with.hosts[0].http.port == 7680);
  CHECK(with.hosts[0].http.token_file == "/tmp/x/tok");
  CHECK(with.hosts[0].http.max_request_bytes == 4096);
  CHECK(cfg::digest(with) != cfg::digest(plain));
  // Round trip.
  CHECK(cfg::digest(cfg::parse(cfg::to_json(with).dump(), "/tmp/x")) == cfg::digest(with));
}

TEST_CASE("http endpoint: refused naming the field", "[config]") {
  auto with = [](json http) {
    auto doc = reference();
    doc["hosts"][0]["http"] = std::move(http);
    return error_of(doc);
  };
  CHECK_THAT(with({{"port", 7680}, {"address", "0.0.0.0"}}),
             Catch::Contains("/hosts/0/http/token_file") && Catch::Contains("not loopback"));
  CHECK_THAT(with({{"port", 7680}, {"adress", "127.0.0.1"}}), Catch::Contains("/hosts/0/http/adress"));
  CHECK_THAT(with({{"port", 70000}}), Catch::Contains("/hosts/0/http/port"));
  CHECK_THAT(with({{"port", "80"}}), Catch::Contains("/hosts/0/http/port"));
  CHECK_THAT(with({{"port", 7680}, {"max_request_bytes", 10}}),
             Catch::Contains("/hosts/0/http/max_request_bytes"));
  auto doc = reference();
  doc["hosts"][0]["http"] = {{"port", doc["hosts"][0]["port"]}};
  CHECK_THAT(error_of(doc), Catch::Contains("/hosts/0/http/port") && Catch::Contains("differ"));
  // A non-loopback address with a token file is accepted.
  doc["hosts"][0]["http"] = {{"port", 7680}, {"address", "0.0.0.0"}, {"token_file", "/etc/tok"}};
  CHECK_NOTHROW(cfg::parse(doc.dump(), "/tmp/x"));
}
