// The Gantt chart of a run (`vidline status RUN_ID --gantt`), read back from its SVG:
// lanes in the configured order whatever ran first, waiting for a decoder drawn as waiting
// (not as a handoff), failed attempts and host outages marked, the stages running now
// drawn up to a "now" line.
#include <catch2/catch.hpp>

#include <regex>

#include <nlohmann/json.hpp>

#include "actors/planner/gantt.hpp"
#include "nodes/verbs/commands.hpp"

using nlohmann::json;
using namespace vidline;

namespace {

json span(double a, double b) {
  return {{"start_s", a}, {"end_s", b}, {"start_unix", 1e9 + a}, {"end_unix", 1e9 + b}};
}

json job(int index, const std::string& pool, double t0) {
  return {{"index", index}, {"seed", 1}, {"width", 416}, {"height", 736}, {"seconds", 5},
          {"state", "succeeded"}, {"pool", pool}, {"decoder", "dec"},
          {"stages", {{"conditioning", nullptr}, {"sampling", span(t0, t0 + 10)},
                      {"waiting", span(t0 + 10, t0 + 300)},
                      {"handoff", span(t0 + 300, t0 + 301)}, {"pending", nullptr},
                      {"decode", span(t0 + 301, t0 + 305)}}},
          {"running", nullptr}, {"failed_attempts", json::array()}};
}

/// A run on pools p_b, p_a (configured in that order) and one decoder; `first` samples first.
json status(const std::string& first, const std::string& second) {
  json st = {{"run_id", "r"}, {"mode", "m"}, {"state", "succeeded"}, {"now_s", 700},
             {"lanes", {{"pools", {{{"name", "p_b"}, {"host", "hb"}},
                                   {{"name", "p_a"}, {"host", "ha"}}}},
                        {"decoders", {{{"name", "dec"}, {"host", "hb"}}}}}},
             {"outages", json::array()},
             {"summary", {{"makespan_s", 610}}}};
  st["jobs"] = {job(0, first, 0), job(1, second, 5), job(2, first, 305)};
  return st;
}

std::vector<std::string> lanes_of(const std::string& svg) {
  std::vector<std::string> out;
  std::regex lane("<text class=\"lane\"[^>]*>([^<]*)</text>");
  for (std::sregex_iterator it(svg.begin(), svg.end(), lane), end; it != end; ++it)
    out.push_back((*it)[1]);
  return out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

/// The widths of the rects whose class is `cls`.
std::vector<double> widths(const std::string& svg, const std::string& cls) {
  std::vector<double> out;
  std::regex r("<rect class=\"" + cls + "\" x=\"[^\"]*\" y=\"[^\"]*\" width=\"([^\"]*)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), r), end; it != end; ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

} // namespace

TEST_CASE("gantt: lanes in the configured order, the same whichever pool ran first",
          "[gantt]") {
  auto one = actors::planner::gantt_svg({nodes::verbs::run_gantt(status("p_a", "p_b"))});
  auto two = actors::planner::gantt_svg({nodes::verbs::run_gantt(status("p_b", "p_a"))});
  const std::vector<std::string> want{"p_b", "p_a", "dec"};
  CHECK(lanes_of(one) == want);
  CHECK(lanes_of(two) == want);
  // A status without `lanes` (an older coordinator): by name, also the same every time.
  auto a = status("p_a", "p_b"), b = status("p_b", "p_a");
  a.erase("lanes");
  b.erase("lanes");
  auto three = actors::planner::gantt_svg({nodes::verbs::run_gantt(a)});
  auto four = actors::planner::gantt_svg({nodes::verbs::run_gantt(b)});
  CHECK(lanes_of(three) == std::vector<std::string>{"p_a", "p_b", "dec"});
  CHECK(lanes_of(four) == lanes_of(three));
}

TEST_CASE("gantt: waiting for a decoder is drawn as waiting, not as a handoff", "[gantt]") {
  auto svg = actors::planner::gantt_svg({nodes::verbs::run_gantt(status("p_a", "p_b"))});
  auto waits = widths(svg, "bar waiting");
  auto handoffs = widths(svg, "bar handoff");
  REQUIRE(waits.size() == 3);
  REQUIRE(handoffs.size() == 3);
  for (double w : handoffs)
    CHECK(w < 5);  // 1 s of 610 on ~1000 px
  for (double w : waits)
    CHECK(w > 300);  // 290 s
  CHECK(count(svg, "<title>job 0 waiting ") == 1);
  CHECK(count(svg, "class=\"now\"") == 0);  // finished: no now line
}

TEST_CASE("gantt: a running run with a failed attempt and an outage", "[gantt]") {
  auto st = status("p_a", "p_b");
  st["state"] = "running";
  st["now_s"] = 400.0;
  // Job 2 samples now on p_a since 350 s, after its first attempt on p_b failed when host
  // hb went down (320 s to 340 s).
  auto& j2 = st["jobs"][2];
  j2["state"] = "sampling";
  j2["pool"] = "p_a";
  j2["stages"] = {{"conditioning", nullptr}, {"sampling", nullptr}, {"waiting", nullptr},
                  {"handoff", nullptr}, {"pending", nullptr}, {"decode", nullptr}};
  j2["running"] = {{"stage", "sampling"}, {"lane", "p_a"}, {"start_s", 350.0},
                   {"start_unix", 1e9 + 350}};
  j2["failed_attempts"] = {{{"stage", "sampling"}, {"lane", "p_b"}, {"start_s", 305.0},
                            {"end_s", 320.0}, {"reason", "pool p_b: host hb went down"}}};
  st["outages"] = {{{"host", "hb"}, {"from_s", 320.0}, {"to_s", 340.0},
                    {"from_unix", 1e9 + 320}, {"to_unix", 1e9 + 340}},
                   {{"host", "ha"}, {"from_s", 390.0}, {"to_s", nullptr},
                    {"from_unix", 1e9 + 390}, {"to_unix", nullptr}}};
  auto svg = actors::planner::gantt_svg({nodes::verbs::run_gantt(st)});
  INFO(svg);
  CHECK(count(svg, "<g class=\"failed\">") == 1);
  CHECK(count(svg, "failed sampling attempt 305.0-320.0 s: pool p_b: host hb went down") == 1);
  // hb's outage over its two lanes (p_b, dec), ha's (still down) over p_a.
  CHECK(count(svg, "<rect class=\"outage\"") == 3);
  CHECK(count(svg, "host hb down 320.0-340.0 s") == 2);
  CHECK(count(svg, "host ha down 390.0-now") == 1);
  // The running stage reaches the now line.
  REQUIRE(count(svg, "class=\"now\"") == 1);
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("<line class=\"now\" x1=\"([^\"]*)\"")));
  const double now_x = std::stod(m[1]);
  REQUIRE(std::regex_search(
    svg, m, std::regex("<rect class=\"running sampling\" x=\"([^\"]*)\" y=\"[^\"]*\" width=\"([^\"]*)\"")));
  CHECK(std::stod(m[1]) + std::stod(m[2]) == Approx(now_x).margin(0.2));
  CHECK(count(svg, "<title>job 2 running sampling since 350.0 s") == 1);
  CHECK(lanes_of(svg) == std::vector<std::string>{"p_b", "p_a", "dec"});
}

TEST_CASE("gantt: a shot taking a frame from another is joined to it by a dependency line",
          "[gantt]") {
  // Job 2 takes the last frame of job 0: a line from the end of job 0's decode (305 s) to
  // the start of job 2's sampling (305 s here); job 1 takes from nothing.
  auto st = status("p_a", "p_b");
  st["jobs"][2]["takes_from"] = {
    {{"input", "first_frame"}, {"from", "shot0"}, {"from_index", 0}, {"frame", "last"}}};
  st["jobs"][1]["takes_from"] = json::array();
  auto svg = actors::planner::gantt_svg({nodes::verbs::run_gantt(st)});
  CHECK(count(svg, "class=\"dependency\"") == 1);
  CHECK(count(svg, "<title>job 2 takes from job 0</title>") == 1);
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("class=\"dependency\"><line x1=\"([^\"]*)\" "
                                               "y1=\"[^\"]*\" x2=\"([^\"]*)\"")));
  CHECK(std::stod(m[1]) <= std::stod(m[2]) + 0.01);  // it starts after its source's video
  // Without takes_from (an older coordinator's status): no line.
  auto plain = actors::planner::gantt_svg({nodes::verbs::run_gantt(status("p_a", "p_b"))});
  CHECK(count(plain, "class=\"dependency\"") == 0);
}
