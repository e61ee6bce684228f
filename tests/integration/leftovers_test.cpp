// A node sheds the leftovers no live work owns (actors/latents/sweep.hpp): a real node
// started on a data directory holding old part files, a dead stage's work directory,
// unused conditioning, video links whose named file was taken away and old receipts;
// what is recent, or still linked, stays.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/support/cluster.hpp"

using namespace testing_support;
namespace fs = std::filesystem;

namespace {

void plant(const std::string& path, double age_s) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << "left over";
  fs::last_write_time(path, fs::file_time_type::clock::now() -
                              std::chrono::duration_cast<fs::file_time_type::duration>(
                                std::chrono::duration<double>(age_s)));
}

} // namespace

TEST_CASE("a node removes leftovers past their retention and keeps the rest", "[integration]") {
  temp_dir dir;
  const json knobs = {{"stale_part_s", 2}, {"conditioning_retention_s", 2},
                      {"output_blob_retention_s", 2}, {"receipt_retention_s", 2},
                      {"input_retention_s", 2}};
  const auto config = write_reference_config(dir.path(), 0.05, knobs);
  const std::string d = dir.path() + "/host_b";
  const std::string sha_a(64, 'a'), sha_b(64, 'b'), sha_c(64, 'c');
  const double day = 86400, future = -3600;  // a negative age: written "in an hour"

  plant(d + "/latents/" + sha_a + ".latent.part", day);
  plant(d + "/latents/" + sha_a + ".latent.part.state", day);
  plant(d + "/latents/" + sha_b + ".latent.part", future);       // a fetch under way
  plant(d + "/work/41/latent", day);                             // a dead stage
  fs::last_write_time(d + "/work/41", fs::last_write_time(d + "/work/41/latent"));
  plant(d + "/work/42/latent", future);                          // a live one
  plant(d + "/conditioning/" + sha_a + ".cond", day);
  plant(d + "/conditioning/" + sha_b + ".cond", future);
  plant(d + "/outputs/.by-sha256/" + sha_a, day);                // named file taken away
  plant(d + "/outputs/.by-sha256/" + sha_b, day);
  fs::create_directories(d + "/outputs/r1");
  fs::create_hard_link(d + "/outputs/.by-sha256/" + sha_b, d + "/outputs/r1/shot.simvideo");
  plant(d + "/receipts/r0/0.sampled", day);
  plant(d + "/receipts/r2/0.decoded", future);
  plant(d + "/latents/" + sha_c + ".latent", day);               // a latent: the store's, not the sweep's
  plant(d + "/latents/" + sha_c + ".latent.quarantined", day);   // a corrupt copy set aside
  plant(d + "/latents/" + sha_b + ".job", day);                  // a note whose latent never came
  plant(d + "/latents/" + sha_c + ".job", day);                  // the note of a latent here
  plant(d + "/inputs/" + sha_a, day);                            // a reference nobody used lately
  plant(d + "/inputs/" + sha_b, future);
  plant(d + "/inputs/." + sha_c + ".123-1.part", day);           // an upload given up

  auto node = start_node(dir.path(), config, "host_b");
  const std::vector<std::string> gone = {
    d + "/latents/" + sha_a + ".latent.part", d + "/latents/" + sha_a + ".latent.part.state",
    d + "/work/41", d + "/conditioning/" + sha_a + ".cond", d + "/outputs/.by-sha256/" + sha_a,
    d + "/receipts/r0", d + "/latents/" + sha_c + ".latent.quarantined",
    d + "/latents/" + sha_b + ".job", d + "/inputs/" + sha_a, d + "/inputs/." + sha_c + ".123-1.part"};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto all_gone = [&] {
    for (auto& p : gone)
      if (fs::exists(p))
        return false;
    return true;
  };
  while (!all_gone() && std::chrono::steady_clock::now() < deadline && node->running())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (auto& p : gone)
    CHECK_FALSE(fs::exists(p));
  CHECK(fs::exists(d + "/latents/" + sha_b + ".latent.part"));
  CHECK(fs::exists(d + "/work/42/latent"));
  CHECK(fs::exists(d + "/conditioning/" + sha_b + ".cond"));
  CHECK(fs::exists(d + "/outputs/.by-sha256/" + sha_b));
  CHECK(fs::exists(d + "/outputs/r1/shot.simvideo"));
  CHECK(fs::exists(d + "/receipts/r2/0.decoded"));
  CHECK(fs::exists(d + "/latents/" + sha_c + ".latent"));
  CHECK(fs::exists(d + "/latents/" + sha_c + ".job"));
  CHECK(fs::exists(d + "/inputs/" + sha_b));
  CHECK(node->running());
}
