// A verdict in a run index (actors::decoder::append_review), as the decoder that made the
// video writes it and a collection does: the video's last line again with `review`, once
// per revision, never after a later one, nothing where the index holds no line of the
// video; and what a decoder refuses of a verdict_index before it touches a file.
#include <catch2/catch.hpp>

#include <fstream>
#include <limits>

#include "actors/decoder/output_index.hpp"
#include "actors/inbound.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::actors;
using namespace vidline::actors::decoder;
using nlohmann::json;
using testing_support::temp_dir;

namespace {

const std::string sha(64, 'c');

std::vector<json> lines_of(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    out.push_back(json::parse(l));
  return out;
}

json review(const char* verdict, uint32_t revision, json take = nullptr) {
  return {{"verdict", verdict}, {"at_unix", 1700000000.5}, {"take_index", take},
          {"revision", revision}};
}

} // namespace

TEST_CASE("run index: a verdict is the video's line again with its review, once per revision") {
  temp_dir dir;
  const std::string index = dir.path() + "/index.jsonl";
  {
    std::ofstream out(index);
    out << json{{"name", "harbour"}, {"file", "harbour.mp4"}, {"run_id", "r"}, {"index", 0},
                {"output_sha256", sha}, {"bytes", 10}}.dump() << "\n";
    out << json{{"name", "night"}, {"file", "night.mp4"}, {"run_id", "r"}, {"index", 1},
                {"output_sha256", std::string(64, 'd')}, {"bytes", 11}}.dump() << "\n";
  }
  using actors::decoder::review_result;
  CHECK(actors::decoder::append_review(index, "harbour.mp4", sha, review("accepted", 1))
        == review_result::appended);
  auto l = lines_of(index);
  REQUIRE(l.size() == 3);
  CHECK(l[2]["name"] == "harbour");
  CHECK(l[2]["bytes"] == 10);  // the video's line, whole
  CHECK(l[2]["review"] == review("accepted", 1));
  // Again (a resend): nothing written.
  CHECK(actors::decoder::append_review(index, "harbour.mp4", sha, review("accepted", 1))
        == review_result::already);
  CHECK(lines_of(index).size() == 3);
  // A later verdict: its own line, the last of the name.
  CHECK(actors::decoder::append_review(index, "harbour.mp4", sha, review("rejected", 2, 2))
        == review_result::appended);
  l = lines_of(index);
  REQUIRE(l.size() == 4);
  CHECK(l[3]["review"]["verdict"] == "rejected");
  CHECK(l[3]["review"]["take_index"] == 2);
  // The earlier one arriving late (overtaken): not written after the later one.
  CHECK(actors::decoder::append_review(index, "harbour.mp4", sha, review("accepted", 1))
        == review_result::already);
  CHECK(lines_of(index).size() == 4);
  // No line of that video (another digest, another file, no index at all): nothing.
  CHECK(actors::decoder::append_review(index, "harbour.mp4", std::string(64, 'e'),
                                    review("accepted", 1)) == review_result::no_line);
  CHECK(actors::decoder::append_review(index, "other.mp4", sha, review("accepted", 1))
        == review_result::no_line);
  CHECK(actors::decoder::append_review(dir.path() + "/none.jsonl", "harbour.mp4", sha,
                                    review("accepted", 1)) == review_result::no_line);
  CHECK_FALSE(std::ifstream(dir.path() + "/none.jsonl").good());
  CHECK(lines_of(index).size() == 4);
  // A retracted video takes its verdicts' lines with it (same name and digest).
  actors::decoder::cache c;
  CHECK(actors::decoder::remove(c, index, "harbour", sha) == 3);
  CHECK(lines_of(index).size() == 1);
}

TEST_CASE("run index: a review written before revisions is taken as none") {
  temp_dir dir;
  const std::string index = dir.path() + "/index.jsonl";
  std::ofstream(index) << json{{"name", "harbour"}, {"file", "harbour.mp4"},
                               {"output_sha256", sha},
                               {"review", {{"verdict", "accepted"}, {"at_unix", 1.0},
                                           {"take_index", nullptr}}}}.dump() << "\n";
  CHECK(actors::decoder::append_review(index, "harbour.mp4", sha, review("accepted", 1))
        == actors::decoder::review_result::appended);
  CHECK(lines_of(index).back()["review"]["revision"] == 1);
}

TEST_CASE("a verdict for the run index is refused unless it names a video in the run's folder") {
  msg::verdict_index v;
  v.decoder = "dec";
  v.run_id = "20240101-120000-beef";
  v.index = 2;
  v.output = "/srv/b/outputs/20240101-120000-beef/harbour-take-2.mp4";
  v.output_sha256 = sha;
  v.verdict = "accepted";
  v.at_unix = 1700000000;
  v.revision = 1;
  const std::string outputs = "/srv/b/outputs";
  CHECK(inbound::check_verdict(v, outputs).empty());
  auto refused = [&](auto change) {
    auto w = v;
    change(w);
    return inbound::check_verdict(w, outputs);
  };
  CHECK_THAT(refused([](auto& w) { w.run_id = "../etc"; }), Catch::Contains("run_id"));
  CHECK_THAT(refused([](auto& w) { w.output = "/srv/b/outputs/other-run/harbour.mp4"; }),
             Catch::Contains("not in the run's output directory"));
  CHECK_THAT(refused([](auto& w) { w.output = "/srv/b/outputs/20240101-120000-beef/../x.mp4"; }),
             Catch::Contains("file name"));
  CHECK_THAT(refused([](auto& w) { w.output = "/srv/b/outputs/20240101-120000-beef/a/b.mp4"; }),
             Catch::Contains("file name"));
  CHECK_THAT(refused([](auto& w) { w.output = "/srv/b/outputs/20240101-120000-beef/"; }),
             Catch::Contains("not in the run's output directory"));
  CHECK_THAT(refused([](auto& w) { w.output_sha256 = "abc"; }), Catch::Contains("output_sha256"));
  CHECK_THAT(refused([](auto& w) { w.verdict = "maybe"; }), Catch::Contains("verdict"));
  CHECK_THAT(refused([](auto& w) { w.revision = 0; }), Catch::Contains("revision"));
  CHECK_THAT(refused([](auto& w) { w.at_unix = std::numeric_limits<double>::quiet_NaN(); }),
             Catch::Contains("at_unix"));
}
