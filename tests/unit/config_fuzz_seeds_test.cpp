// The config fuzz target's seed corpus (tests/fuzz/config/), replayed in the normal build:
// config::parse throws nothing but config_error, never the "unexpected JSON error" that
// marks a check the readers missed, and an accepted config round-trips through to_json.
// Also the findings of fuzz_config, kept as regressions.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/config.hpp"

using namespace vidline;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("every config seed parses or is refused with a config_error", "[config][fuzz]") {
  const fs::path dir = fs::path(VIDLINE_SOURCE_DIR) / "tests" / "fuzz" / "config";
  int seeds = 0, accepted = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    CAPTURE(e.path().filename().string());
    ++seeds;
    config::cluster c;
    try {
      c = config::parse(read_all(e.path()), "/nonexistent/base");
    } catch (const config::config_error& err) {
      CHECK(err.message().rfind("unexpected JSON error", 0) != 0);
      continue;
    }
    ++accepted;
    const std::string once = config::to_json(c).dump();
    CHECK(config::to_json(config::parse(once, "/nonexistent/base")).dump() == once);
  }
  CHECK(seeds >= 30);
  CHECK(accepted >= 5);
}

TEST_CASE("fuzz_config finding: a number too large for a double is invalid JSON", "[config][fuzz]") {
  try {
    config::parse("{\"cluster\": 1e999999}", "");
    FAIL("accepted");
  } catch (const config::config_error& e) {
    CHECK(e.path() == "");
    CHECK(e.message().rfind("invalid JSON: number overflow", 0) == 0);
  }
}
