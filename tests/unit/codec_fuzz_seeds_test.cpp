// The frame fuzz target's seed corpus (tests/fuzz/frame/), replayed in the normal build:
// every seed decodes or is refused without an exception, a decoded frame re-encodes to
// the same envelope, and the valid seeds are what they are named for.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "messages/envelope.hpp"
#include "messages/messages.hpp"

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

TEST_CASE("every frame seed decodes or is refused cleanly", "[codec][fuzz]") {
  const fs::path dir = fs::path(VIDLINE_SOURCE_DIR) / "tests" / "fuzz" / "frame";
  int seeds = 0, frames = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    CAPTURE(name);
    ++seeds;
    const std::string bytes = read_all(e.path());
    msg::frame f;
    const auto err = msg::decode_frame(bytes.data(), bytes.size(), msg::decode_limits{}, f);
    const bool edge = name.rfind("edge_", 0) == 0 || name.rfind("body_", 0) == 0;
    if (err != msg::decode_error::none) {
      CHECK(edge);
      continue;
    }
    ++frames;
    if (!edge) {  // a message seed is named after its type (and maybe a variant)
      CHECK(name.rfind(f.env.type, 0) == 0);
      msgpack::object_handle keep;
      CHECK(msg::unpack_body(f.body, msg::decode_limits{}, keep));
    }
    const std::string again = msg::encode_frame(f.env, f.body);
    msg::frame g;
    REQUIRE(msg::decode_frame(again.data(), again.size(), msg::decode_limits{}, g) ==
            msg::decode_error::none);
    CHECK(g.env.type == f.env.type);
    CHECK(g.env.id == f.env.id);
    CHECK(g.body == f.body);
  }
  CHECK(seeds >= 40);
  CHECK(frames >= 20);
}
