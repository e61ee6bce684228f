// The data plane's server answers `latent_fetch` of kind "output" (collecting finished
// videos, docs/shots.md) from its output directory by digest, and only there: a latent
// request never reads an output, an output request never reads a latent, an unknown kind
// is refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "common/sha256.hpp"
#include "messages/envelope.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/data/transfer.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;

namespace {

msg::latent_chunk ask(nodes::data::latent_server& s, const std::string& sha, const std::string& kind,
                      std::vector<char>& frame, msgpack::object_handle& keep) {
  msg::latent_fetch req;
  req.transfer_id = 7;
  req.sha256 = sha;
  req.length = 1024;
  req.kind = kind;
  s.serve(req, [&](std::size_t n) {
    frame.assign(n, 0);
    return frame.data();
  });
  msg::latent_chunk c;
  REQUIRE(msg::unpack_body(std::string_view(frame.data(), frame.size()),
                           nodes::bus::wire_limits(config::knobs{}), keep));
  keep.get().convert(c);
  return c;
}

} // namespace

TEST_CASE("outputs are served by digest from the output directory, latents from theirs") {
  testing_support::temp_dir dir("vl-output-serve");
  const std::string video = "a finished video", latent = "a latent";
  const auto vsha = to_hex(sha256_of(video)), lsha = to_hex(sha256_of(latent));
  std::filesystem::create_directories(dir.path() + "/latents");
  std::filesystem::create_directories(dir.path() + "/blobs");
  std::ofstream(dir.path() + "/latents/" + lsha + ".latent") << latent;
  std::ofstream(dir.path() + "/blobs/" + vsha) << video;

  nodes::data::latent_server s(dir.path() + "/latents", 1 << 20);
  std::vector<char> frame;
  msgpack::object_handle keep;
  // No output directory set: outputs are not found.
  CHECK(ask(s, vsha, "output", frame, keep).error == nodes::data::latent_not_found);
  s.set_output_dir(dir.path() + "/blobs");

  auto c = ask(s, vsha, "output", frame, keep);
  CHECK(c.error.empty());
  CHECK(c.total == video.size());
  CHECK(std::string(c.data.ptr, c.data.size) == video);
  c = ask(s, lsha, "", frame, keep);
  CHECK(c.error.empty());
  CHECK(std::string(c.data.ptr, c.data.size) == latent);
  // Each kind looks only in its own directory.
  CHECK(ask(s, vsha, "", frame, keep).error == nodes::data::latent_not_found);
  CHECK(ask(s, lsha, "output", frame, keep).error == nodes::data::latent_not_found);
  CHECK(ask(s, vsha, "../etc", frame, keep).error.find("unknown kind '../etc'") == 0);
  CHECK(ask(s, "../" + vsha.substr(3), "output", frame, keep).error == "bad sha256");
}

TEST_CASE("inputs are served by digest from the input directory, and only there") {
  testing_support::temp_dir dir("vl-input-serve");
  const std::string image = "a reference image", latent = "a latent";
  const auto isha = to_hex(sha256_of(image)), lsha = to_hex(sha256_of(latent));
  std::filesystem::create_directories(dir.path() + "/latents");
  std::filesystem::create_directories(dir.path() + "/inputs");
  std::ofstream(dir.path() + "/latents/" + lsha + ".latent") << latent;
  std::ofstream(dir.path() + "/inputs/" + isha) << image;

  nodes::data::latent_server s(dir.path() + "/latents", 1 << 20);
  std::vector<char> frame;
  msgpack::object_handle keep;
  CHECK(ask(s, isha, "input", frame, keep).error == nodes::data::latent_not_found);  // none set
  s.set_input_dir(dir.path() + "/inputs");
  auto c = ask(s, isha, "input", frame, keep);
  CHECK(c.error.empty());
  CHECK(c.total == image.size());
  CHECK(std::string(c.data.ptr, c.data.size) == image);
  CHECK(ask(s, isha, "", frame, keep).error == nodes::data::latent_not_found);
  CHECK(ask(s, lsha, "input", frame, keep).error == nodes::data::latent_not_found);
  CHECK(ask(s, isha, "output", frame, keep).error == nodes::data::latent_not_found);
}
