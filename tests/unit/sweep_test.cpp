// The leftovers rule (actors/latents/sweep.hpp) and the copy-truncate cap of backend logs.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "actors/latents/sweep.hpp"
#include "common/files.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using actors::latents::leftover;

TEST_CASE("sweep removes each kind of leftover only past its own limit", "[sweep]") {
  actors::latents::sweep_limits lim;
  lim.part_s = 10;
  lim.work_dir_s = 100;
  lim.conditioning_s = 50;
  lim.output_blob_s = 20;
  lim.receipt_s = 30;
  std::vector<actors::latents::listed> l = {
    {"p-young", leftover::part, 9.9, 1, 5},
    {"p-old", leftover::part, 10, 1, 7},
    {"w-young", leftover::work_dir, 99, 1, 100},
    {"w-old", leftover::work_dir, 101, 1, 100},
    {"c-old", leftover::conditioning, 51, 1, 3},
    {"b-linked", leftover::output_blob, 1000, 2, 900},  // its named video is still there
    {"b-alone", leftover::output_blob, 21, 1, 800},
    {"b-alone-young", leftover::output_blob, 19, 1, 800},
    {"r-old", leftover::receipt, 31, 1, 60},
  };
  auto r = actors::latents::sweep(l, lim);
  CHECK(r.remove == std::vector<std::string>{"p-old", "w-old", "c-old", "b-alone", "r-old"});
  CHECK(r.bytes == 7 + 100 + 3 + 800 + 60);
  CHECK(r.counts[int(leftover::part)] == 1);
  CHECK(r.counts[int(leftover::work_dir)] == 1);
  CHECK(r.counts[int(leftover::output_blob)] == 1);
}

TEST_CASE("sweep keeps a kind for ever when its limit is 0", "[sweep]") {
  actors::latents::sweep_limits lim;
  lim.part_s = 0;
  lim.receipt_s = 0;
  auto r = actors::latents::sweep({{"p", leftover::part, 1e9, 1, 1}, {"r", leftover::receipt, 1e9, 1, 1},
                           {"c", leftover::conditioning, 1e9, 1, 1}},
                          lim);
  CHECK(r.remove == std::vector<std::string>{"c"});
}

TEST_CASE("a backend log is capped: copied to .1, truncated, at most keep rotations", "[sweep]") {
  testing_support::temp_dir dir;
  const std::string log = dir.path() + "/worker.log";
  CHECK(files::rotated_name(log, 2) == dir.path() + "/worker.2.log");
  CHECK_FALSE(files::cap_appended_log(log, 100, 2));  // no file: nothing to do
  // A writer that appends, as a backend process does (O_APPEND), across the rotations.
  std::ofstream w(log, std::ios::app);
  auto write = [&](char c, int n) {
    w << std::string(n, c);
    w.flush();
  };
  write('a', 50);
  CHECK_FALSE(files::cap_appended_log(log, 100, 2));
  write('b', 60);
  CHECK(files::cap_appended_log(log, 100, 2));
  CHECK(std::filesystem::file_size(log) == 0);
  CHECK(files::read_all(files::rotated_name(log, 1)) == std::string(50, 'a') + std::string(60, 'b'));
  write('c', 120);
  CHECK(files::read_all(log) == std::string(120, 'c'));  // appended at the new end, no hole
  CHECK(files::cap_appended_log(log, 100, 2));
  write('d', 101);
  CHECK(files::cap_appended_log(log, 100, 2));
  CHECK(files::read_all(files::rotated_name(log, 1)) == std::string(101, 'd'));
  CHECK(files::read_all(files::rotated_name(log, 2)) == std::string(120, 'c'));
  CHECK_FALSE(std::filesystem::exists(files::rotated_name(log, 3)));
}
