// The metrics registry (common/metrics.hpp): the exposition format Prometheus reads,
// counters and histograms as it expects them, bad updates ignored, every metric
// documented in docs/metrics.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/metrics.hpp"

using namespace vidline::metrics;

namespace {

std::string read_doc(const std::string& rel) {
  std::ifstream in(std::string(VIDLINE_SOURCE_DIR) + "/" + rel);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The lines of `text` that are samples (not comments).
std::vector<std::string> samples(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#')
      out.push_back(line);
  return out;
}

} // namespace

TEST_CASE("metrics: counters, gauges and histograms in the text format 0.0.4") {
  registry r;
  r.add("vidline_actor_restarts_total", {{"actor", "pool:a"}});
  r.add("vidline_actor_restarts_total", {{"actor", "pool:a"}}, 2);
  r.set("vidline_decoder_pending", {{"decoder", "d"}}, 1);
  r.set_max("vidline_decoder_pending_max", {{"decoder", "d"}}, 1);
  r.set_max("vidline_decoder_pending_max", {{"decoder", "d"}}, 0);
  r.observe("vidline_stage_duration_seconds", {{"stage", "decode"}, {"lane", "d"}}, 0.7);
  r.observe("vidline_stage_duration_seconds", {{"lane", "d"}, {"stage", "decode"}}, 4000);
  const auto text = r.render();
  INFO(text);
  CHECK(text.find("# TYPE vidline_actor_restarts_total counter\n") != std::string::npos);
  CHECK(text.find("vidline_actor_restarts_total{actor=\"pool:a\"} 3\n") != std::string::npos);
  CHECK(text.find("vidline_decoder_pending_max{decoder=\"d\"} 1\n") != std::string::npos);
  CHECK(text.find("# TYPE vidline_stage_duration_seconds histogram\n") != std::string::npos);
  // Buckets are cumulative; labels sorted, `le` last; +Inf holds every observation.
  CHECK(text.find("vidline_stage_duration_seconds_bucket{lane=\"d\",stage=\"decode\",le=\"0.5\"} 0\n") != std::string::npos);
  CHECK(text.find("vidline_stage_duration_seconds_bucket{lane=\"d\",stage=\"decode\",le=\"1\"} 1\n") != std::string::npos);
  CHECK(text.find("vidline_stage_duration_seconds_bucket{lane=\"d\",stage=\"decode\",le=\"3600\"} 1\n") != std::string::npos);
  CHECK(text.find("vidline_stage_duration_seconds_bucket{lane=\"d\",stage=\"decode\",le=\"+Inf\"} 2\n") != std::string::npos);
  CHECK(text.find("vidline_stage_duration_seconds_count{lane=\"d\",stage=\"decode\"} 2\n") != std::string::npos);
  CHECK(text.find("vidline_stage_duration_seconds_sum{lane=\"d\",stage=\"decode\"} 4000.7\n") != std::string::npos);
  // Families nobody set are not printed.
  CHECK(text.find("vidline_handoff_bytes_total") == std::string::npos);
  // Every sample line parses as name{labels} value.
  const std::regex line(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (\+Inf|-Inf|NaN|-?[0-9.eE+-]+)$)");
  for (auto& s : samples(text)) {
    INFO(s);
    CHECK(std::regex_match(s, line));
  }
}

TEST_CASE("metrics: label values are escaped, wrong updates are ignored, not thrown") {
  registry r;
  r.set("vidline_data_dir_free_bytes", {{"dir", "/a\"b\\c\nd"}}, 5);
  CHECK(r.render().find(R"(vidline_data_dir_free_bytes{dir="/a\"b\\c\nd"} 5)") != std::string::npos);
  r.add("vidline_no_such_metric_total", {}, 1);         // not declared
  r.set("vidline_actor_restarts_total", {}, 1);          // a counter set like a gauge
  r.add("vidline_actor_restarts_total", {}, -1);         // counters only go up
  r.observe("vidline_stage_duration_seconds", {}, NAN);  // not a duration
  CHECK(r.misuse() == 4);
  CHECK(r.render().find("vidline_no_such_metric_total") == std::string::npos);
  CHECK(r.render().find("vidline_actor_restarts_total") == std::string::npos);
}

TEST_CASE("metrics: collectors add their samples at each exposition, a failing one is skipped") {
  registry r;
  int calls = 0;
  const int id = r.add_collector([&calls] {
    ++calls;
    return std::vector<sample>{{"vidline_bus_frames_sent_total", {}, 42}};
  });
  r.add_collector([]() -> std::vector<sample> { throw std::runtime_error("boom"); });
  CHECK(r.render().find("vidline_bus_frames_sent_total 42\n") != std::string::npos);
  r.remove_collector(id);
  CHECK(r.render().find("vidline_bus_frames_sent_total") == std::string::npos);
  CHECK(calls == 1);
}

TEST_CASE("metrics: updates from many threads are all counted") {
  registry r;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&r] {
      for (int i = 0; i < 10000; ++i) {
        r.add("vidline_handoff_bytes_total", {{"decoder", "d"}}, 2);
        r.observe("vidline_stage_duration_seconds", {{"stage", "decode"}, {"lane", "d"}}, 1);
        if (i % 1000 == 0)
          (void)r.render();
      }
    });
  for (auto& t : ts)
    t.join();
  CHECK(r.value("vidline_handoff_bytes_total", {{"decoder", "d"}}) == 80000);
  CHECK(r.render().find("vidline_stage_duration_seconds_count{lane=\"d\",stage=\"decode\"} 40000") !=
        std::string::npos);
}

TEST_CASE("metrics: names follow the conventions and docs/metrics.md lists every one") {
  const auto doc = read_doc("docs/metrics.md");
  REQUIRE(!doc.empty());
  for (auto& d : definitions()) {
    INFO(d.name);
    CHECK(d.name.rfind("vidline_", 0) == 0);
    const bool total = d.name.size() > 6 && d.name.compare(d.name.size() - 6, 6, "_total") == 0;
    CHECK(total == (d.type == kind::counter));  // `_total` counters, and only counters
    CHECK(doc.find("`" + d.name + "`") != std::string::npos);
  }
  // And the dashboard example only graphs metrics that exist.
  const auto dash = read_doc("docs/grafana-dashboard.json");
  REQUIRE(!dash.empty());
  std::regex name("vidline_[a-z_]+");
  for (std::sregex_iterator it(dash.begin(), dash.end(), name), end; it != end; ++it) {
    std::string n = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (n.size() > std::strlen(suffix) &&
          n.compare(n.size() - std::strlen(suffix), std::strlen(suffix), suffix) == 0)
        n.erase(n.size() - std::strlen(suffix));
    INFO(n);
    bool known = false;
    for (auto& d : definitions())
      known = known || d.name == n;
    CHECK(known);
  }
}

TEST_CASE("metrics: numbers as the format writes them") {
  CHECK(format_value(1) == "1");
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(INFINITY) == "+Inf");
  CHECK(format_value(NAN) == "NaN");
  CHECK(std::stod(format_value(1.0 / 3)) == 1.0 / 3);
}
