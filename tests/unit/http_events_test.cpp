// The API's pure parts: the submit body read field by field, and the SSE events made from
// two statuses of a run (nodes/http_events.hpp).
#include <catch2/catch.hpp>

#include "nodes/http_events.hpp"
#include "nodes/http_review.hpp"
#include "nodes/http_server.hpp"
#include "nodes/verbs/line_text.hpp"

using nlohmann::json;
using namespace vidline::nodes;
using namespace vidline::nodes::verbs;

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

TEST_CASE("events: a first look is a snapshot, then what changed, and the end") {
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

TEST_CASE("events: jobs added to a run and a cancel are told, a cancelled run ends the stream") {
  auto s0 = status("running", {job(0, "sampling"), job(1, "queued")});
  s0["priority"] = 5;
  // `vidline submit` added job 2: a job event for it, and the run's new size.
  auto s1 = s0;
  s1["jobs"].push_back(job(2, "queued"));
  auto e1 = events::run_events(s0, s1);
  REQUIRE(names(e1) == std::vector<std::string>{"job", "run"});
  CHECK(e1[0].data["index"] == 2);
  CHECK(e1[1].data["total"] == 3);
  CHECK(e1[1].data["priority"] == 5);
  // One job cancelled: its state, and it counts as done.
  auto s2 = s1;
  s2["jobs"][1]["state"] = "cancelled";
  auto e2 = events::run_events(s1, s2);
  REQUIRE(names(e2) == std::vector<std::string>{"job", "run"});
  CHECK(e2[0].data["state"] == "cancelled");
  CHECK(e2[1].data["done"] == 1);
  // The whole run cancelled: every unfinished job cancelled, then the end.
  auto s3 = s2;
  s3["state"] = "cancelled";
  s3["jobs"][0]["state"] = "cancelled";
  s3["jobs"][2]["state"] = "cancelled";
  auto e3 = events::run_events(s2, s3);
  REQUIRE(names(e3) == std::vector<std::string>{"job", "job", "run", "end"});
  CHECK(e3[2].data["done"] == 3);
  CHECK(e3[3].data["state"] == "cancelled");
  // First seen already cancelled: the snapshot and the end at once.
  CHECK(names(events::run_events(nullptr, s3)) == std::vector<std::string>{"snapshot", "end"});
}

TEST_CASE("api: priority in a submit body, the body of jobs added to a run, bodies that say nothing") {
  const std::string base = R"("mode":"m","prompt":"p","width":416,"height":736,"seconds":5,"count":1,"seed":0)";
  api_error err;
  auto ok = parse_submit("{" + base + R"(,"priority":-1000000})", err);
  REQUIRE(ok);
  CHECK(ok->priority == -1000000);
  REQUIRE(parse_submit("{" + base + "}", err));
  CHECK(parse_submit("{" + base + "}", err)->priority == 0);
  auto bad_submit = [&](const std::string& extra) {
    api_error e;
    CHECK_FALSE(parse_submit("{" + base + "," + extra + "}", e));
    CHECK(e.status == 400);
    return e.message;
  };
  CHECK_THAT(bad_submit(R"("priority":1000001)"), Catch::Contains("'priority' must be from -1000000 to 1000000"));
  CHECK_THAT(bad_submit(R"("priority":-1000001)"), Catch::Contains("'priority'"));
  CHECK_THAT(bad_submit(R"("priority":18446744073709551615)"), Catch::Contains("'priority'"));
  CHECK_THAT(bad_submit(R"("priority":"high")"), Catch::Contains("'priority' must be a whole number"));
  CHECK_THAT(bad_submit(R"("priority":1.5)"), Catch::Contains("'priority'"));

  const std::string add = R"("prompt":"more","width":416,"height":736,"seconds":5,"count":2,"seed":7)";
  auto jobs = parse_add_jobs("r1", "{" + add + R"(,"request_id":"k"})", err);
  REQUIRE(jobs);
  CHECK(jobs->run_id == "r1");
  CHECK(jobs->count == 2);
  CHECK(jobs->seed == 7);
  CHECK(jobs->request_id == "k");
  auto bad_add = [&](const std::string& body) {
    api_error e;
    CHECK_FALSE(parse_add_jobs("r1", body, e));
    CHECK(e.status == 400);
    return e.message;
  };
  // The run's mode and priority are the run's: naming them is an unknown field.
  CHECK_THAT(bad_add("{" + add + R"(,"mode":"m"})"), Catch::Contains("unknown field 'mode'"));
  CHECK_THAT(bad_add("{" + add + R"(,"priority":1})"), Catch::Contains("unknown field 'priority'"));
  CHECK_THAT(bad_add(R"({"prompt":"p","width":416,"height":736,"seconds":5,"seed":1})"), Catch::Contains("missing field 'count'"));
  CHECK_THAT(bad_add(R"({"prompt":"p","width":4,"height":736,"seconds":5,"count":1,"seed":1})"), Catch::Contains("'width'"));
  CHECK_THAT(bad_add("nope"), Catch::Contains("not JSON"));

  CHECK(parse_empty_body("", "cancel", err));
  CHECK(parse_empty_body("{}", "cancel", err));
  CHECK_FALSE(parse_empty_body(R"({"job":1})", "cancel", err));
  CHECK_THAT(err.message, Catch::Contains("unknown field 'job' (cancel takes no fields)"));
  CHECK_FALSE(parse_empty_body("[]", "cancel", err));
  CHECK_THAT(err.message, Catch::Contains("empty JSON object"));
  CHECK_FALSE(parse_empty_body("{", "resume", err));
  CHECK_THAT(err.message, Catch::Contains("not JSON"));
}

TEST_CASE("api: a shot list in a submit body, each shot's fields named") {
  api_error err;
  auto ok = parse_submit(R"({"mode":"m","priority":2,"request_id":"k","shots":[
      {"prompt":"a","width":416,"height":736,"seconds":5,"seed":1,"takes":2,"name":"hero","priority":-3},
      {"prompt":"b","width":736,"height":416,"seconds":10,"seed":9,"reference":"/refs/b.png"}]})",
                         err);
  INFO(err.message);
  REQUIRE(ok);
  CHECK(ok->priority == 2);
  CHECK(ok->count == 0);
  CHECK(ok->prompt.empty());
  REQUIRE(ok->shots.size() == 2);
  CHECK(ok->shots[0].takes == 2);
  CHECK(ok->shots[0].name == "hero");
  CHECK(ok->shots[0].priority == -3);
  CHECK(ok->shots[1].takes == 1);
  CHECK(ok->shots[1].width == 736);
  CHECK(ok->shots[1].reference == "/refs/b.png");
  auto bad = [&](const std::string& body) {
    api_error e;
    CHECK_FALSE(parse_submit(body, e));
    CHECK(e.status == 400);
    return e.message;
  };
  const std::string shot = R"({"prompt":"a","width":416,"height":736,"seconds":5,"seed":1})";
  CHECK_THAT(bad(R"({"mode":"m","shots":[]})"), Catch::Contains("'shots' must be a non-empty array"));
  CHECK_THAT(bad(R"({"mode":"m","shots":{}})"), Catch::Contains("'shots' must be"));
  CHECK_THAT(bad(R"({"mode":"m","count":2,"shots":[)" + shot + "]}"), Catch::Contains("field 'count': a shot list"));
  CHECK_THAT(bad(R"({"mode":"m","shots":[)" + shot + ",7]}"), Catch::Contains("'shots[1]' must be a JSON object"));
  CHECK_THAT(bad(R"({"mode":"m","shots":[)" + shot + R"(,{"prompt":"a","width":416,"height":736,"seconds":5}]})"),
             Catch::Contains("missing field 'shots[1].seed'"));
  CHECK_THAT(bad(R"({"mode":"m","shots":[{"prompt":"a","width":416,"height":736,"seconds":5,"seed":1,"colour":1}]})"),
             Catch::Contains("unknown field 'shots[0].colour'"));
  CHECK_THAT(bad(R"({"mode":"m","shots":[{"prompt":"a","width":416,"height":736,"seconds":5,"seed":1,"takes":1001}]})"),
             Catch::Contains("'shots[0].takes' must be from 1 to 1000"));
  CHECK_THAT(bad(R"({"mode":"m","shots":[{"prompt_file":"p.txt","width":416,"height":736,"seconds":5,"seed":1}]})"),
             Catch::Contains("'shots[0].prompt_file'"));
  CHECK_THAT(bad(R"({"mode":"m","shots":[{"prompt":"a","width":416,"height":736,"seconds":5,"seed":1,"priority":2147483648}]})"),
             Catch::Contains("'shots[0].priority'"));
  // Neither form: the uniform fields are asked for.
  CHECK_THAT(bad(R"({"mode":"m"})"), Catch::Contains("missing field 'prompt'"));
}

TEST_CASE("events: every event of a job names its shot beside the index") {
  auto named = [](const char* state) {
    auto j = job(4, state);
    j["name"] = "harbour-dawn-take-2";
    j["shot"] = "harbour-dawn";
    j["take"] = 1;
    j["prompt_start"] = "a harbour at dawn, gulls over the cranes";
    return j;
  };
  auto s0 = status("running", json::array({named("sampling")}));
  auto s1 = s0;
  s1["jobs"][0]["progress"] = {{"step", 3}, {"steps", 30}};
  s1["jobs"][0]["failed_attempts"] = json::array({{{"stage", "sampling"}, {"lane", "p"}, {"reason", "oom"}}});
  s1["jobs"][0]["state"] = "queued";
  const std::string label = "job 4 harbour-dawn-take-2 \"a harbour at dawn, gulls over...\"";
  auto es = events::run_events(s0, s1);
  REQUIRE(names(es) == std::vector<std::string>{"job", "progress", "failure"});
  for (auto& e : es)
    CHECK(e.data["label"] == label);
  // A record without a name: the shot and its take.
  auto j = job(2, "queued");
  j["shot"] = "night";
  j["take"] = 2;
  CHECK(job_label(j) == "job 2 night take 3");
}

TEST_CASE("api: a review's body, each wrong field named") {
  api_error err;
  auto r = parse_review("r1", 4, R"({"verdict":"reject","another_take":true})", err);
  REQUIRE(r);
  CHECK(r->run_id == "r1");
  CHECK(r->index == 4);
  CHECK(r->verdict == "reject");
  CHECK(r->another_take);
  r = parse_review("r1", 0, R"({"verdict":"accept"})", err);
  REQUIRE(r);
  CHECK_FALSE(r->another_take);
  auto bad = [](const std::string& body) {
    api_error e;
    CHECK_FALSE(parse_review("r1", 0, body, e));
    CHECK(e.status == 400);
    return e.message;
  };
  CHECK_THAT(bad(""), Catch::Contains("not JSON"));
  CHECK_THAT(bad("[]"), Catch::Contains("JSON object"));
  CHECK_THAT(bad("{}"), Catch::Contains("'verdict'"));
  CHECK_THAT(bad(R"({"verdict":"maybe"})"), Catch::Contains("\"accept\" or \"reject\""));
  CHECK_THAT(bad(R"({"verdict":"reject","another_take":"yes"})"), Catch::Contains("'another_take'"));
  CHECK_THAT(bad(R"({"verdict":"accept","another_take":true})"), Catch::Contains("goes with the verdict \"reject\""));
  CHECK_THAT(bad(R"({"verdict":"accept","seed":3})"), Catch::Contains("unknown field 'seed'"));
  // The answer's HTTP status by the coordinator's code.
  vidline::msg::review_reply a;
  CHECK(review_status(a) == 200);
  a.error = "x";
  a.code = "no_such_run";
  CHECK(review_status(a) == 404);
  a.code = "not_reviewable";
  CHECK(review_status(a) == 409);
  a.code = "invalid";
  CHECK(review_status(a) == 400);
  a = {};
  a.run_id = "r1";
  a.index = 4;
  a.verdict = "rejected";
  a.take_index = 9;
  a.take_seed = 105;
  a.state = "running";
  CHECK(review_json(a) == json{{"run_id", "r1"}, {"index", 4}, {"verdict", "rejected"},
                               {"take", {{"index", 9}, {"seed", 105}}}, {"state", "running"}});
}
