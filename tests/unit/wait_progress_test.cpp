// wait's progress line (nodes/verbs/commands.hpp, progress_line): the ETA is the plan's time left
// from the jobs done, at the pace the real line has kept so far.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "nodes/verbs/commands.hpp"

using nlohmann::json;

namespace {

json status_of(std::size_t done, std::size_t total, double now_s) {
  json jobs = json::array();
  for (std::size_t i = 0; i < total; ++i)
    jobs.push_back({{"index", i}, {"state", i < done ? "succeeded" : "sampling"}});
  return {{"run_id", "r1"},
          {"jobs", jobs},
          {"now_s", now_s},
          {"clock", {{"simulated", false}, {"time_scale", 1.0}}}};
}

} // namespace

TEST_CASE("wait's ETA: the plan's time left, at the pace observed so far") {
  const std::vector<double> planned{100, 200, 300, 400};
  SECTION("on plan: the plan's own time left") {
    auto line = vidline::nodes::verbs::progress_line(status_of(2, 4, 200), planned);
    CHECK(line.find("ETA 200 min") == std::string::npos);
    CHECK(line.find("ETA 3 min by the plan") != std::string::npos);  // 200 s
    CHECK(line.find("observed pace") == std::string::npos);
  }
  SECTION("twice as slow as planned: twice the time left, and said so") {
    auto line = vidline::nodes::verbs::progress_line(status_of(2, 4, 400), planned);
    CHECK(line.find("ETA 7 min by the plan at the observed pace (x2.00)") != std::string::npos);
  }
  SECTION("nothing done yet: the plan alone") {
    auto line = vidline::nodes::verbs::progress_line(status_of(0, 4, 50), planned);
    CHECK(line.find("ETA 7 min by the plan") != std::string::npos);  // 400 s
    CHECK(line.find("observed pace") == std::string::npos);
  }
  SECTION("a pace far off is bounded") {
    auto line = vidline::nodes::verbs::progress_line(status_of(1, 4, 100000), planned);
    CHECK(line.find("(x5.00)") != std::string::npos);
  }
}
