// A node started by `vidline start`: its log lines are in logs/node.log once each, not
// repeated in logs/node.out (which only catches output that is not a log line).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/support/processes.hpp"

using testing_support::process;
using testing_support::read_file;
using testing_support::temp_dir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

int run(const temp_dir& dir, std::vector<std::string> args, double timeout = 60) {
  static int n = 0;
  args.insert(args.begin(), VIDLINE_BINARY);
  process p(args, dir.path() + "/cmd" + std::to_string(++n) + ".out");
  int code = p.wait(timeout);
  if (code != 0)
    UNSCOPED_INFO(p.out() + p.err());
  return code;
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("a started node logs each line once, to node.log, none to node.out") {
  temp_dir dir;
  auto cfg = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/reference.json"));
  auto ports = testing_support::free_ports(2);
  for (std::size_t i = 0; i < 2; ++i) {
    cfg["hosts"][i]["port"] = ports[i];
    cfg["hosts"][i]["data_dir"] = dir.path() + "/" + cfg["hosts"][i]["name"].get<std::string>();
  }
  cfg["backends"]["sim"]["time_scale"] = 0.002;
  cfg["knobs"]["log_file_bytes"] = 4096;  // the smallest cap
  cfg["knobs"]["log_files"] = 2;
  const std::string config = dir.path() + "/cluster.json";
  std::ofstream(config) << cfg.dump(2);
  ::setenv("VIDLINE_STATE_DIR", (dir.path() + "/state").c_str(), 1);

  REQUIRE(run(dir, {"start", "--config", config}) == 0);
  std::ofstream(dir.path() + "/prompt.txt") << "logged once";
  int batch = run(dir, {"run", "--config", config, "--mode", "four_four_xtx_plus_one", "--prompt-file",
                        dir.path() + "/prompt.txt", "--width", "416", "--height", "736", "--seconds", "5",
                        "--count", "3", "--seed", "1"},
                  120);
  CHECK(run(dir, {"stop", "--config", config}) == 0);
  CHECK(batch == 0);

  const std::string logs = dir.path() + "/host_a/logs";
  std::string out = read_file(logs + "/node.out");
  INFO("node.out:\n" << out);
  // Not one log line (timestamp, level, [host]) in node.out.
  static const std::regex log_line(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} \S+ \[host_a\])");
  CHECK(!std::regex_search(out, log_line));

  // One copy of each line, within the cap (rotation itself: tests/unit/node_log_test.cpp;
  // a short run logs less than the smallest cap).
  CHECK(fs::file_size(logs + "/node.log") <= 4096);
  std::string all = read_file(logs + "/node.log");
  for (const char* f : {"/node.1.log", "/node.2.log"})
    if (fs::exists(logs + f))
      all += read_file(logs + f);
  CHECK(occurrences(all, "node host_a up on") == 1);
  // The last line a node writes is there once.
  CHECK(occurrences(all, "node host_a stopped") == 1);
}
