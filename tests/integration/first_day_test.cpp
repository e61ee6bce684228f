// An operator's first day, each trap met on the way: config-adapt from the documented host
// map, a card kind the profile has no timings for, a shot list with several bad lines,
// `start` naming the dashboard, a run submitted while a host is down (CLI and HTTP), a
// reference path that does not exist over HTTP, `status @cluster` in words, `runs --json`
// in the API's shape, `wait` without a run id and its Ctrl-C with --collect, and `stop`
// then `status`/`runs`/`wait` saying at once that no node answers.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include <httplib.h>

#include "config/profile/profile.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;

namespace {

struct cli_result {
  int code;
  std::string out, err;
  double seconds;
};

cli_result vidline_cli(const std::string& dir, std::vector<std::string> args, double limit = 60) {
  static int n = 0;
  args.insert(args.begin(), VIDLINE_BINARY);
  const auto t0 = std::chrono::steady_clock::now();
  process p(args, dir + "/cli." + std::to_string(n++) + ".out");
  int rc = p.wait(limit);
  return {rc, p.out(), p.err(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

/// The host map of docs/backends.md ("vidline config-adapt"), as the page shows it.
json documented_host_map() {
  const auto doc = read_file(std::string(VIDLINE_SOURCE_DIR) + "/docs/backends.md");
  const auto section = doc.find("## vidline config-adapt");
  REQUIRE(section != std::string::npos);
  const auto from = doc.find("```json\n", section);
  REQUIRE(from != std::string::npos);
  const auto to = doc.find("```", from + 8);
  return json::parse(doc.substr(from + 8, to - from - 8));
}

/// `vidline plan --mode all --json` of a 6-job batch on `config`: the modes it planned.
json plan_all(const std::string& dir, const std::string& config) {
  auto p = vidline_cli(dir, {"plan", "--config", config, "--mode", "all", "--width", "416",
                             "--height", "736", "--seconds", "5", "--count", "6", "--json"});
  INFO(p.out + p.err);
  REQUIRE(p.code == 0);
  return json::parse(p.out);
}

/// The lines of a preflight report at `level` ("ok", "warn", "FAIL") whose check's name
/// starts with `name` (a line: the level padded to 4, two spaces, the name, its detail).
std::vector<std::string> report_lines(const std::string& out, const std::string& level,
                                      const std::string& name) {
  std::vector<std::string> found;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(level, 0) == 0 && line.size() > 6 && line.compare(6, name.size(), name) == 0)
      found.push_back(line);
  return found;
}

} // namespace

TEST_CASE("first day: config-adapt takes the documented host map with keygen's keys, its cards' kinds are the profile's") {
  temp_dir dir;
  auto map = documented_host_map();
  for (auto& h : map["hosts"])
    h["data_dir"] = dir.path() + "/" + h["name"].get<std::string>();
  // The documented map gives no card a "profile": each card's kind is derived from its model.
  for (auto& h : map["hosts"])
    for (auto& g : h["gpus"])
      REQUIRE_FALSE(g.contains("profile"));
  std::ofstream(dir.path() + "/hosts.json") << map.dump(2);
  // Without keys: refused, naming the command that makes them.
  auto no_keys = vidline_cli(dir.path(), {"config-adapt", "--host-map", dir.path() + "/hosts.json",
                                          "--out", dir.path() + "/cluster.json"});
  INFO(no_keys.err);
  CHECK(no_keys.code == 2);
  CHECK(no_keys.err.find("vidline keygen --out keys --name host_a") != std::string::npos);
  for (auto* h : {"host_a", "host_b"})
    REQUIRE(vidline_cli(dir.path(), {"keygen", "--out", dir.path() + "/keys", "--name", h}).code == 0);
  auto ok = vidline_cli(dir.path(), {"config-adapt", "--host-map", dir.path() + "/hosts.json",
                                     "--keys", dir.path() + "/keys", "--out", dir.path() + "/cluster.json"});
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  auto c = vidline::config::load(dir.path() + "/cluster.json");
  CHECK(c.find_host("host_b")->secret_key_file == dir.path() + "/keys/host_b.key");
  REQUIRE(c.find_pool("xtx") != nullptr);
  CHECK(c.find_pool("xtx")->profile_key == "rx7900xtx");
  CHECK(c.find_pool("eight")->profile_key == "t10x8");
  CHECK(c.find_decoder("rtx3080ti")->profile_key == "rtx3080ti");

  // Preflight: every kind has timings in the embedded profile, no old name, nothing failed.
  auto pre = vidline_cli(dir.path(), {"preflight", "--config", dir.path() + "/cluster.json",
                                      "--mode", "auto", "--before-start"});
  INFO(pre.out);
  CHECK(report_lines(pre.out, "ok", "profile").size() == 1);
  CHECK(report_lines(pre.out, "warn", "profile").empty());
  CHECK(report_lines(pre.out, "FAIL", "").empty());
  CHECK(pre.code == 0);
  // Plan: every mode plans, the XTX's included.
  auto plans = plan_all(dir.path(), dir.path() + "/cluster.json");
  std::set<std::string> planned;
  for (auto& m : plans["modes"]) {
    INFO(m.dump());
    CHECK_FALSE(m.contains("refused"));
    planned.insert(m["mode"].get<std::string>());
  }
  CHECK(planned.count("four_four_xtx_plus_one"));
  CHECK(planned.count("eight_xtx_plus_one"));

  // A host map written before kinds took their models' names ("profile": "xtx") adapts to
  // the same config: the XTX's pool keeps its name, its kind is the current one.
  map["hosts"][1]["gpus"][1].erase("name");
  map["hosts"][1]["gpus"][1]["profile"] = "xtx";
  std::ofstream(dir.path() + "/old_hosts.json") << map.dump(2);
  REQUIRE(vidline_cli(dir.path(), {"config-adapt", "--host-map", dir.path() + "/old_hosts.json",
                                   "--keys", dir.path() + "/keys", "--out",
                                   dir.path() + "/old.json"}).code == 0);
  auto old = vidline::config::load(dir.path() + "/old.json");
  CHECK(old.find_pool("xtx")->profile_key == "rx7900xtx");
  CHECK(vidline::config::digest(old) == vidline::config::digest(c));

  // A config file written by hand with the old name: it loads and plans; preflight says
  // which field to update and to what.
  auto by_hand = json::parse(read_file(dir.path() + "/cluster.json"));
  std::string field;
  for (std::size_t i = 0; i < by_hand["pools"].size(); ++i)
    if (by_hand["pools"][i]["name"] == "xtx") {
      by_hand["pools"][i]["profile"] = "xtx";
      field = "/pools/" + std::to_string(i) + "/profile";
    }
  std::ofstream(dir.path() + "/by_hand.json") << by_hand.dump(2);
  auto warned = vidline_cli(dir.path(), {"preflight", "--config", dir.path() + "/by_hand.json",
                                         "--mode", "auto", "--before-start"});
  INFO(warned.out);
  CHECK(warned.code == 0);
  const auto old_name = report_lines(warned.out, "warn", "profile name " + field);
  REQUIRE(old_name.size() == 1);
  CHECK(old_name[0].find("old name of kind 'rx7900xtx'") != std::string::npos);
  CHECK(warned.out.find("write \"profile\": \"rx7900xtx\"") != std::string::npos);
  for (auto& m : plan_all(dir.path(), dir.path() + "/by_hand.json")["modes"])
    CHECK_FALSE(m.contains("refused"));
  // A profile file of that time (the reference's XTX entries under "xtx") loads the same;
  // preflight names the entry to rename.
  auto old_profile = json::parse(std::string(vidline::config::profile::profile::reference_json()));
  old_profile["pools"]["xtx"] = old_profile["pools"]["rx7900xtx"];
  old_profile["pools"].erase("rx7900xtx");
  std::ofstream(dir.path() + "/old_profile.json") << old_profile.dump(2);
  by_hand["backends"]["sim"]["profile"] = dir.path() + "/old_profile.json";
  std::ofstream(dir.path() + "/by_hand.json") << by_hand.dump(2);
  warned = vidline_cli(dir.path(), {"preflight", "--config", dir.path() + "/by_hand.json",
                                    "--mode", "auto", "--before-start"});
  INFO(warned.out);
  CHECK(warned.code == 0);
  CHECK(report_lines(warned.out, "warn", "profile name /pools/xtx").size() == 1);
  CHECK(report_lines(warned.out, "ok", "profile").size() == 1);

  // A card the profile has never timed: preflight fails its pool, naming its kind and how
  // to time it.
  map["hosts"][1]["gpus"][1] = {{"model", "NVIDIA GeForce RTX 4090"}, {"vendor", "nvidia"},
                                {"memory_gib", 24}, {"name", "big"}};
  std::ofstream(dir.path() + "/new_card.json") << map.dump(2);
  REQUIRE(vidline_cli(dir.path(), {"config-adapt", "--host-map", dir.path() + "/new_card.json",
                                   "--keys", dir.path() + "/keys", "--out",
                                   dir.path() + "/new_card_cluster.json"}).code == 0);
  auto bad = vidline_cli(dir.path(), {"preflight", "--config", dir.path() + "/new_card_cluster.json",
                                      "--mode", "auto", "--before-start"});
  INFO(bad.out);
  CHECK(bad.code == 1);
  const auto failed = report_lines(bad.out, "FAIL", "profile pool big");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].find("'rtx4090'") != std::string::npos);
  CHECK(bad.out.find("vidline profile build", bad.out.find(failed[0])) != std::string::npos);
}

TEST_CASE("first day: a shot list with several bad lines reports every one") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.02);
  std::ofstream(dir.path() + "/shots.jsonl")
    << R"({"name": "a", "prompt": "one", "width": 416, "height": 736, "seconds": 5, "seed": 1})" "\n"
    << R"({"name": "b", "prompt": "two", "width": 4, "height": 736, "seconds": 5, "seed": 2})" "\n"
    << R"({"name": "c", "prompt": "three", "width": 416, "height": 736, "seconds": 5, "seed": 3})" "\n"
    << "not json\n"
    << R"({"name": "a", "prompt": "dup", "width": 416, "height": 736, "seconds": 5, "seed": 5})" "\n";
  auto r = vidline_cli(dir.path(), {"run", "--config", config, "--mode", "four_four_xtx_plus_one",
                                    "--jobs", dir.path() + "/shots.jsonl", "--background"});
  INFO(r.err);
  CHECK(r.code == 2);
  for (auto* line : {"shots.jsonl:2: width", "shots.jsonl:4: line: not valid JSON",
                     "shots.jsonl:5: name: 'a' is also the name on line 1"})
    CHECK(r.err.find(line) != std::string::npos);
  CHECK(r.err.find("nothing was submitted") != std::string::npos);
}

TEST_CASE("first day: start names the dashboard, a host down is said at submission and in status, stop then status says no node answers") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.02);
  const std::string token = "first-day-token-0123";
  std::ofstream(dir.path() + "/token") << token << "\n";
  auto cfg = json::parse(read_file(config));
  const int http = free_ports(1)[0];
  cfg["hosts"][0]["http"] = {{"port", http}, {"token_file", dir.path() + "/token"}};
  std::ofstream(config) << cfg.dump(2);
  // Only host_a: host_b (the decoder, the XTX) stays down the whole test.
  struct stopper {
    std::string dir, config;
    ~stopper() { vidline_cli(dir, {"stop", "--config", config, "--host", "host_a"}); }
  } stop_at_end{dir.path(), config};
  auto start = vidline_cli(dir.path(), {"start", "--config", config, "--host", "host_a"});
  INFO(start.out + start.err);
  REQUIRE(start.code == 0);
  CHECK(start.out.find("dashboard: http://127.0.0.1:" + std::to_string(http) + "/dashboard/") !=
        std::string::npos);
  auto cluster = vidline::config::load(config);
  vidline::nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  std::ofstream(dir.path() + "/shots.jsonl")
    << R"({"name": "harbour-dawn", "prompt": "a harbour at dawn, gulls over the cranes", "width": 416, "height": 736, "seconds": 5, "seed": 1})" "\n"
    << R"({"name": "night-market", "prompt": "a night market in the rain", "width": 416, "height": 736, "seconds": 5, "seed": 2})" "\n";
  auto run = vidline_cli(dir.path(), {"run", "--config", config, "--mode", "four_four_xtx_plus_one",
                                      "--jobs", dir.path() + "/shots.jsonl", "--background"});
  INFO(run.err);
  REQUIRE(run.code == 0);
  const std::string run_id = run.out.substr(0, run.out.find('\n'));
  CHECK(run.err.find("warning: host host_b is down") != std::string::npos);

  auto status = vidline_cli(dir.path(), {"status", run_id, "--config", config});
  INFO(status.out + status.err);
  CHECK(status.code == 0);
  CHECK(status.out.find("job 0 harbour-dawn \"a harbour at dawn, gulls over...\"") != std::string::npos);
  CHECK(status.err.find("warning: host host_b is down") != std::string::npos);
  auto view = vidline_cli(dir.path(), {"status", "@cluster", "--config", config});
  INFO(view.out);
  CHECK(view.out.find("hosts:") != std::string::npos);
  CHECK(view.out.find("host_a up") != std::string::npos);
  CHECK(view.out.find("decoder rtx3080ti on host_b: not answering") != std::string::npos);

  // Over HTTP: a reference that is not there is refused naming the shot; a run submitted
  // while host_b is down says so in its answer.
  httplib::Client h("127.0.0.1", http);
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  json shots = {{"mode", "four_four_xtx_plus_one"},
                {"shots", {{{"name", "ok"}, {"prompt", "p"}, {"width", 416}, {"height", 736},
                            {"seconds", 5}, {"seed", 1}},
                           {{"name", "lost-ref"}, {"prompt", "p"}, {"width", 416}, {"height", 736},
                            {"seconds", 5}, {"seed", 2}, {"reference", dir.path() + "/nope.png"}}}}};
  auto refused = h.Post("/v1/runs", auth, shots.dump(), "application/json");
  REQUIRE(refused);
  INFO(refused->body);
  CHECK(refused->status == 400);
  CHECK(refused->body.find("shots[1] ('lost-ref')") != std::string::npos);
  shots["shots"].erase(1);
  auto sub = h.Post("/v1/runs", auth, shots.dump(), "application/json");
  REQUIRE(sub);
  INFO(sub->body);
  REQUIRE(sub->status == 201);
  const auto http_run = json::parse(sub->body)["run_id"].get<std::string>();
  CHECK(json::parse(sub->body)["hosts_down"] == json::array({"host_b"}));

  // `runs --json`: the API's {runs, latest}.
  auto runs = vidline_cli(dir.path(), {"runs", "--config", config, "--json"});
  REQUIRE(runs.code == 0);
  auto listing = json::parse(runs.out);
  CHECK(listing["latest"] == http_run);
  CHECK(listing["runs"].size() == 2);

  // `wait` without a run id follows the latest; Ctrl-C says how to collect the rest.
  {
    process w({VIDLINE_BINARY, "wait", "--config", config, "--collect", dir.path() + "/videos"},
              dir.path() + "/wait.out");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (w.out().find("run " + http_run + ":") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline && w.running())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling its output
    INFO(w.out() + w.err());
    REQUIRE(w.out().find("run " + http_run + ":") != std::string::npos);
    w.signal(SIGINT);
    CHECK(w.wait(10) == 130);
    CHECK(w.err().find("vidline wait " + http_run + " --collect " + dir.path() + "/videos") !=
          std::string::npos);
  }

  // Stopped: status, runs and wait say at once that no node answers, and how to start them.
  REQUIRE(vidline_cli(dir.path(), {"stop", "--config", config, "--host", "host_a"}).code == 0);
  for (std::vector<std::string> verb : {std::vector<std::string>{"status"},
                                        std::vector<std::string>{"runs"},
                                        std::vector<std::string>{"wait", run_id}}) {
    verb.insert(verb.end(), {"--config", config});
    auto r = vidline_cli(dir.path(), verb);
    INFO(verb[0] << ": " << r.err);
    CHECK(r.code == 6);
    CHECK(r.seconds < 3);
    CHECK(r.err.find("no node answers") != std::string::npos);
    CHECK(r.err.find("vidline start --config " + config) != std::string::npos);
  }
}
