// A host's input store (nodes/data/inputs.hpp): chunks in order, verified before the rename, an
// input stored once; out-of-order chunks told where to go on; bad digests, sizes and names
// refused with the reason; the whole-body form of PUT /v1/inputs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "common/sha256.hpp"
#include "nodes/data/inputs.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
namespace fs = std::filesystem;

namespace {

msg::input_put chunk(const std::string& sha, const std::string& all, uint64_t offset,
                     std::size_t n) {
  msg::input_put p;
  p.sha256 = sha;
  p.total = all.size();
  p.offset = offset;
  p.data = msgpack::type::raw_ref(all.data() + offset, static_cast<uint32_t>(n));
  return p;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    v.push_back(e.path().filename().string());
  return v;
}

} // namespace

TEST_CASE("an input arrives in order, is verified, renamed, and stored once", "[inputs]") {
  testing_support::temp_dir dir("vl-inputs");
  const std::string d = dir.path() + "/inputs";
  nodes::data::input_store s(d);
  const std::string image = "0123456789abcdefghij";
  const std::string sha = to_hex(sha256_of(image));

  auto probe = s.put("c1", chunk(sha, image, 0, 0));
  CHECK_FALSE(probe.done);
  CHECK(probe.error.empty());
  CHECK(probe.next == 0);
  CHECK_FALSE(s.size_of(sha));

  auto r = s.put("c1", chunk(sha, image, 0, 8));
  CHECK(r.next == 8);
  CHECK(s.uploads() == 1);
  // A chunk out of order (a lost reply): told where to go on; nothing written.
  r = s.put("c1", chunk(sha, image, 16, 4));
  CHECK(r.error.empty());
  CHECK_FALSE(r.done);
  CHECK(r.next == 8);
  // Another uploader of the same input has its own part file.
  CHECK(s.put("c2", chunk(sha, image, 8, 4)).next == 0);
  r = s.put("c1", chunk(sha, image, 8, 12));
  CHECK(r.done);
  CHECK(r.error.empty());
  CHECK(s.uploads() == 0);
  CHECK(s.size_of(sha) == image.size());
  CHECK(files::read_all(d + "/" + sha) == image);
  CHECK(names_in(d) == std::vector<std::string>{sha});

  // Stored: a probe says so at once.
  CHECK(s.put("c3", chunk(sha, image, 0, 0)).done);
  CHECK(s.put("c3", chunk(sha, image, 0, 5)).done);  // not rewritten
  // A claim of another size for the digest stored is refused.
  auto wrong = chunk(sha, image, 0, 0);
  wrong.total = 3;
  CHECK(s.put("c3", wrong).error.find("holds input") != std::string::npos);
}

TEST_CASE("bad uploads are refused with their reason, nothing kept", "[inputs]") {
  testing_support::temp_dir dir("vl-inputs-bad");
  const std::string d = dir.path() + "/inputs";
  nodes::data::input_store s(d, 16);
  const std::string image = "twelve bytes";
  const std::string sha = to_hex(sha256_of(image));
  const std::string other = to_hex(sha256_of("other"));

  // The bytes of another digest: refused at the last chunk, the part removed.
  auto r = s.put("c", chunk(other, image, 0, image.size()));
  CHECK_FALSE(r.done);
  CHECK(r.error.find("hash to " + sha + ", not " + other) != std::string::npos);
  CHECK(names_in(d).empty());
  CHECK(s.put("c", chunk("../etc/passwd", image, 0, 1)).error ==
        "sha256 must be 64 lowercase hex digits");
  std::string big(17, 'x');
  CHECK(s.put("c", chunk(to_hex(sha256_of(big)), big, 0, 4)).error.find("over the limit") !=
        std::string::npos);
  auto past = chunk(sha, image, 0, image.size());
  past.total = 4;
  CHECK(s.put("c", past).error.find("past the input's total") != std::string::npos);
  std::string none;
  CHECK(s.put("c", chunk(sha, none, 0, 0)).error.find("0 bytes") != std::string::npos);
  CHECK(names_in(d).empty());
  nodes::data::input_store nowhere("");
  CHECK(nowhere.put("c", chunk(sha, image, 0, 1)).error == "this node keeps no inputs");
}

TEST_CASE("a whole upload (PUT /v1/inputs) is checked against its digest", "[inputs]") {
  testing_support::temp_dir dir("vl-inputs-whole");
  nodes::data::input_store s(dir.path() + "/inputs", 32);
  const std::string image = "an image";
  const std::string sha = to_hex(sha256_of(image));
  CHECK(s.put_whole(sha, image).status == 201);
  CHECK(s.put_whole(sha, image).status == 200);
  CHECK(s.size_of(sha) == image.size());
  auto bad = s.put_whole(to_hex(sha256_of("x")), image);
  CHECK(bad.status == 400);
  CHECK(bad.error.find("hashes to " + sha) != std::string::npos);
  CHECK(s.put_whole("ABC", image).status == 400);
  CHECK(s.put_whole(sha, "").status == 400);
  CHECK(s.put_whole(to_hex(sha256_of(std::string(33, 'y'))), std::string(33, 'y')).status == 413);
  CHECK(names_in(dir.path() + "/inputs") == std::vector<std::string>{sha});
}
