// The API's pure parts: the submit body read field by field, and the SSE events made from
// two statuses of a run (nodes/http_events.hpp).
#include <catch2/catch.hpp>

#include "nodes/http_events.hpp"
#include "nodes/http_server.hpp"

using nlohmann::json;
using namespace vidline::nodes;

namespace {

json job(int index, const char* state) {
  return {{"index", index}, {"state", state}, {"pool", "p"}, {"decoder", nullptr},
          {"progress", nullptr}, {"failed_attempts", json::array()}, {"error", nullptr}};
}

json status(const char* state, json jobs) {
  return {{"run_id", "r1"}, {"state", state}, {"mode", "m"}, {"now_s", 1.0},
          {"summary", {{"succeeded", 0}}}, {"outages", json::array()}, {"jobs", std::move(jobs)}};
}

std::vector<std::string> names(const std::vector<events::event>& es) {
  std::vector<std::string> out;
  for (auto& e : es)
    out.push_back(e.name);
  return out;
}

} // namespace

TEST_CASE("api: a submit body is read field by field, errors name the field") {
  api_error err;
  auto ok = parse_submit(R"({"mode":"m","prompt":"p","width":416,"height":736,"seconds":5,"count":2,"seed":18446744073709551614})", err);
  REQUIRE(ok);
  CHECK(ok->seed == 18446744073709551614ull);
  CHECK(ok->count == 2);
  auto bad = [&](const std::string& body) {
    api_error e;
    CHECK_FALSE(parse_submit(body, e));
    CHECK(e.status == 400);
    return e.message;
  };
  const std::string base = R"("mode":"m","prompt":"p","width":416,"height":736,"seconds":5)";
  CHECK_THAT(bad("[1]"), Catch::Contains("JSON object"));
  CHECK_THAT(bad("{" + base + R"(,"count":1,"seed":0,"x":1})"), Catch::Contains("unknown field 'x'"));
  CHECK_THAT(bad("{" + base + R"(,"count":0,"seed":0})"), Catch::Contains("'count'"));
  CHECK_THAT(bad("{" + base + R"(,"count":-1,"seed":0})"), Catch::Contains("'count'"));
  CHECK_THAT(bad("{" + base + R"(,"count":1.5,"seed":0})"), Catch::Contains("'count'"));
  CHECK_THAT(bad("{" + base + R"(,"count":1})"), Catch::Contains("missing field 'seed'"));
  CHECK_THAT(bad("{" + base + R"(,"count":2,"seed":18446744073709551615})"), Catch::Contains("2^64-1"));
  CHECK_THAT(bad("{\"mode\":\xff}"), Catch::Contains("not JSON"));
}

TEST_CASE("events: a first look is a snapshot; then what changed, and the end") {
  auto s0 = status("running", {job(0, "sampling"), job(1, "queued")});
  CHECK(names(events::run_events(nullptr, s0)) == std::vector<std::string>{"snapshot"});
  CHECK(events::run_events(s0, s0).empty());
  auto s1 = s0;
  s1["now_s"] = 2.0;  // the clock alone is no event
  CHECK(events::run_events(s0, s1).empty());
  s1["jobs"][0]["progress"] = {{"step", 3}, {"steps", 30}};
  CHECK(names(events::run_events(s0, s1)) == std::vector<std::string>{"progress"});
  auto s2 = s1;
  s2["jobs"][0]["failed_attempts"] = json::array({{{"stage", "sampling"}, {"lane", "p"}, {"reason", "oom"}}});
  s2["jobs"][1]["state"] = "sampling";
  auto e2 = events::run_events(s1, s2);
  CHECK(names(e2) == std::vector<std::string>{"job", "failure", "job"});
  CHECK(e2[1].data["reason"] == "oom");
  CHECK(e2[1].data["index"] == 0);
  auto s3 = s2;
  s3["state"] = "failed";
  s3["jobs"][0]["state"] = "succeeded";
  s3["jobs"][1]["state"] = "failed";
  s3["jobs"][1]["error"] = "gave up";
  auto e3 = events::run_events(s2, s3);
  CHECK(names(e3) == std::vector<std::string>{"job", "job", "failure", "run", "end"});
  CHECK(e3[2].data["reason"] == "gave up");
  CHECK(e3[3].data["done"] == 2);
  CHECK(events::sse_text(e3[4], 7).rfind("id: 7\nevent: end\ndata: {", 0) == 0);
}
