/// Unit tests of the hello check (nodes/bus/hello.hpp) and of the config digest it carries.

#include <string>

#include <catch2/catch.hpp>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "common/sha256.hpp"
#include "config/config.hpp"
#include "messages/envelope.hpp"
#include "messages/messages.hpp"
#include "nodes/bus/hello.hpp"
#include "vidline/embedded_config.hpp"
#include "vidline/version.hpp"

using namespace vidline;
using nlohmann::json;

namespace {

msg::heartbeat beat(std::string version, std::string digest) {
  msg::heartbeat hb;
  hb.host = "host_b";
  hb.boot_id = 7;
  hb.seq = 1;
  hb.sent_unix_s = 1.7e9;
  hb.version = std::move(version);
  hb.config_digest = std::move(digest);
  return hb;
}

const std::string digest_a(64, 'a');
const std::string digest_b(64, 'b');

} // namespace

TEST_CASE("a hello with this node's version and config digest is accepted") {
  const nodes::bus::hello_identity ours{"0.1.0", digest_a};
  CHECK_FALSE(nodes::bus::hello_mismatch(ours, beat("0.1.0", digest_a)));
}

TEST_CASE("a hello of another version is refused, naming both versions") {
  const nodes::bus::hello_identity ours{"0.1.0", digest_a};
  auto why = nodes::bus::hello_mismatch(ours, beat("0.2.0", digest_a));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("0.2.0") && Catch::Contains("0.1.0") &&
                     Catch::Contains("one version"));
  // The version is checked first: a peer of another build usually has another digest too,
  // and the version is what the operator has to fix.
  why = nodes::bus::hello_mismatch(ours, beat("0.1.1", digest_b));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("0.1.1"));
}

TEST_CASE("a hello without a version (a build older than the check) is refused") {
  const nodes::bus::hello_identity ours{"0.1.0", digest_a};
  auto why = nodes::bus::hello_mismatch(ours, beat("", ""));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("no version"));
}

TEST_CASE("a hello from another config is refused, naming both digests") {
  const nodes::bus::hello_identity ours{"0.1.0", digest_a};
  auto why = nodes::bus::hello_mismatch(ours, beat("0.1.0", digest_b));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("another cluster config") &&
                     Catch::Contains(digest_a.substr(0, 16)) &&
                     Catch::Contains(digest_b.substr(0, 16)));
  why = nodes::bus::hello_mismatch(ours, beat("0.1.0", ""));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("none"));
}

TEST_CASE("the hello fields round-trip, and an older sender's beat decodes with them empty") {
  const auto hb = beat(version_string, digest_a);
  msg::heartbeat back;
  REQUIRE(msg::unpack_body_as(msg::pack_body(hb), msg::decode_limits{}, back));
  CHECK(back.version == version_string);
  CHECK(back.config_digest == digest_a);

  // The map an older node sends: the four fields it knew, no hello.
  msgpack::sbuffer old;
  msgpack::packer<msgpack::sbuffer> pk(old);
  pk.pack_map(4);
  pk.pack(std::string("host")), pk.pack(std::string("host_b"));
  pk.pack(std::string("boot_id")), pk.pack(uint64_t{9});
  pk.pack(std::string("seq")), pk.pack(uint64_t{1});
  pk.pack(std::string("sent_unix_s")), pk.pack(1.7e9);
  msg::heartbeat from_old;
  REQUIRE(msg::unpack_body_as(std::string_view(old.data(), old.size()), msg::decode_limits{},
                              from_old));
  CHECK(from_old.boot_id == 9);
  CHECK(from_old.version.empty());
  CHECK(nodes::bus::hello_mismatch({version_string, digest_a}, from_old));
}

TEST_CASE("the project version is generated from CMakeLists.txt") {
  const std::string v = version_string;
  REQUIRE_FALSE(v.empty());
  CHECK(v.find_first_not_of("0123456789.") == std::string::npos);
}

TEST_CASE("the config digest ignores layout and key order, and sees any value") {
  const auto text = std::string(embedded::reference_config);
  const auto c = config::parse(text, "/srv/line");
  const std::string d = config::digest(c);
  CHECK(is_sha256_hex(d));

  // The same config, keys reordered (nlohmann sorts them) and laid out otherwise.
  auto j = json::parse(text);
  CHECK(config::digest(config::parse(j.dump(), "/srv/line")) == d);
  CHECK(config::digest(config::parse(j.dump(7), "/srv/line")) == d);
  // A default written out is the same config as a default left out.
  j["knobs"]["log_files"] = config::knobs{}.log_files;
  CHECK(config::digest(config::parse(j.dump(), "/srv/line")) == d);

  SECTION("a knob") {
    j["knobs"]["log_files"] = 7;
    CHECK(config::digest(config::parse(j.dump(), "/srv/line")) != d);
  }
  SECTION("a port") {
    j["hosts"][1]["port"] = j["hosts"][1]["port"].get<int>() + 1;
    CHECK(config::digest(config::parse(j.dump(), "/srv/line")) != d);
  }
  SECTION("relative data directories resolved from another place") {
    CHECK(config::digest(config::parse(text, "/srv/other")) != d);
  }
}
