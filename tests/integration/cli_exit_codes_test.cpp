// The command line as an operator's script sees it: the real binary, its exit codes
// (docs/exit-codes.md, nodes/verbs/exit_codes.hpp) for each class of failure, and the text of its
// errors: each names what is wrong, briefly. The first cases need no node; the last start
// a two-node line on loopback.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "nodes/verbs/exit_codes.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
namespace exit_code = vidline::nodes::verbs::exit_code;

namespace {

struct outcome {
  int code = -1;
  std::string out, err;
};

/// Runs `vidline ARGS...` to its end (at most `seconds`; a hang fails the test).
outcome cli(const temp_dir& dir, std::vector<std::string> args, double seconds = 30) {
  static int n = 0;
  args.insert(args.begin(), VIDLINE_BINARY);
  process p(args, dir.path() + "/cli." + std::to_string(n++) + ".out");
  outcome o;
  o.code = p.wait(seconds);
  o.out = p.out();
  o.err = p.err();
  return o;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> run_args(const std::string& config, const std::string& prompt,
                                  const std::string& count = "1",
                                  const std::string& seed = "1") {
  return {"run",     "--config", config, "--mode",    "four_four_plus_one", "--prompt-file",
          prompt,    "--width",  "416",  "--height",  "736",
          "--seconds", "5",      "--count", count,    "--seed",             seed};
}

} // namespace

TEST_CASE("an unknown verb is named, with the list of verbs", "[cli][usage]") {
  temp_dir dir;
  auto r = cli(dir, {"nosuchverb"});
  INFO(r.err);
  CHECK(r.code == exit_code::usage);
  CHECK(has(r.err, "unknown verb 'nosuchverb'"));
  for (auto verb : {"run", "wait", "status", "plan", "node"})
    CHECK(has(r.err, verb));
  CHECK_FALSE(has(r.err, "A subcommand is required"));
}

TEST_CASE("every numeric option refuses a bad value briefly, naming the option", "[cli][usage]") {
  temp_dir dir;
  const std::string cfg = std::string(VIDLINE_SOURCE_DIR) + "/config/examples/two_hosts_small.json";
  std::ofstream(dir.path() + "/p.txt") << "a prompt";
  const auto prompt = dir.path() + "/p.txt";
  struct bad {
    std::vector<std::string> args;
    std::string option;
  };
  auto run_with = [&](const std::string& opt, const std::string& value) {
    auto a = run_args(cfg, prompt);
    for (std::size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == opt)
        a[i + 1] = value;
    return bad{a, opt};
  };
  const std::vector<bad> cases = {
    run_with("--seed", "-5"),
    run_with("--seed", "18446744073709551616"),
    run_with("--width", "-5"),
    run_with("--width", "7"),
    run_with("--height", "1e9"),
    run_with("--seconds", "0"),
    run_with("--count", "0"),
    run_with("--count", "-1"),
    {{"stop", "--config", cfg, "--grace", "-1"}, "--grace"},
    {{"stop", "--config", cfg, "--grace", "nan"}, "--grace"},
    {{"wait", "r", "--timeout", "-3"}, "--timeout"},
    {{"wait", "r", "--timeout", "inf"}, "--timeout"},
    {{"resume", "r", "--timeout", "-1"}, "--timeout"},
    {{"status", "r", "--timeout", "0"}, "--timeout"},
    {{"preflight", "--config", cfg, "--mode", "both_plus_one", "--timeout", "-1"}, "--timeout"},
    {{"start", "--config", cfg, "--timeout", "0"}, "--timeout"},
    {{"plan", "--mode", "all", "--width", "416", "--height", "736", "--seconds", "5",
      "--count", "-2"}, "--count"},
    {{"plan", "--mode", "all", "--width", "416", "--height", "736", "--seconds", "5",
      "--count", "3", "--seed", "-5"}, "--seed"},
  };
  for (auto& c : cases) {
    std::string line;
    for (auto& a : c.args)
      line += a + " ";
    auto r = cli(dir, c.args);
    INFO(line << "\n" << r.err);
    CHECK(r.code == exit_code::usage);
    CHECK(has(r.err, c.option));
    CHECK(r.err.size() < 300);                    // not DBL_MAX in 300 digits
    CHECK_FALSE(has(r.err, "18446744073709551611"));  // -5 as a uint64
  }
}

TEST_CASE("seeds never wrap past 2^64-1", "[cli][usage]") {
  temp_dir dir;
  const std::string cfg = std::string(VIDLINE_SOURCE_DIR) + "/config/examples/two_hosts_small.json";
  std::ofstream(dir.path() + "/p.txt") << "a prompt";
  auto r = cli(dir, run_args(cfg, dir.path() + "/p.txt", "10", "18446744073709551610"));
  INFO(r.err);
  CHECK(r.code == exit_code::usage);
  CHECK(has(r.err, "--seed 18446744073709551610 with --count 10"));
  CHECK(has(r.err, "18446744073709551606"));  // the largest seed that fits
  auto p = cli(dir, {"plan", "--mode", "both_plus_one", "--config", cfg, "--width", "416",
                     "--height", "736", "--seconds", "5", "--count", "2", "--seed",
                     "18446744073709551615"});
  INFO(p.err);
  CHECK(p.code == exit_code::usage);
  CHECK(has(p.err, "--seed"));
  // The last seed itself is fine.
  auto ok = cli(dir, {"plan", "--mode", "both_plus_one", "--config", cfg, "--width", "416",
                      "--height", "736", "--seconds", "5", "--count", "2", "--seed",
                      "18446744073709551614", "--json"});
  INFO(ok.err);
  REQUIRE(ok.code == exit_code::ok);
  auto j = json::parse(ok.out);
  CHECK(j["jobs"][1]["seed"].get<uint64_t>() == 18446744073709551615ull);
}

TEST_CASE("the prompt file is checked before anything is sent", "[cli][usage]") {
  temp_dir dir;
  // No node is up: each refusal must come from the client, at once, not after a timeout.
  auto config = write_reference_config(dir.path(), 0.01);
  auto dir_prompt = cli(dir, run_args(config, dir.path()), 10);
  INFO(dir_prompt.err);
  CHECK(dir_prompt.code == exit_code::usage);
  CHECK(has(dir_prompt.err, "is a directory"));
  CHECK_FALSE(has(dir_prompt.err, "empty"));

  std::ofstream(dir.path() + "/empty.txt").flush();
  auto empty = cli(dir, run_args(config, dir.path() + "/empty.txt"), 10);
  CHECK(empty.code == exit_code::usage);
  CHECK(has(empty.err, "is empty"));

  auto missing = cli(dir, run_args(config, dir.path() + "/nosuch.txt"), 10);
  CHECK(missing.code == exit_code::usage);
  CHECK(has(missing.err, "does not exist"));

  {
    std::ofstream big(dir.path() + "/big.txt");
    big << std::string(20u << 20, 'x');
  }
  auto started = std::chrono::steady_clock::now();
  auto big = cli(dir, run_args(config, dir.path() + "/big.txt"), 10);
  INFO(big.err);
  CHECK(big.code == exit_code::usage);
  CHECK(has(big.err, "max_prompt_bytes (65536"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
}

TEST_CASE("with no node up: unreachable (6), never 'still running' or a usage error",
          "[cli][unreachable]") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.01);
  std::ofstream(dir.path() + "/p.txt") << "a prompt";
  auto run = cli(dir, run_args(config, dir.path() + "/p.txt"), 40);
  INFO(run.err);
  CHECK(run.code == exit_code::unreachable);
  CHECK(has(run.err, "no answer from the coordinator"));

  auto status = cli(dir, {"status", "--config", config, "--timeout", "1"}, 20);
  INFO(status.err);
  CHECK(status.code == exit_code::unreachable);
  // Nothing listens at the coordinator's address: said at once, with how to start the nodes.
  CHECK(has(status.err, "no node answers"));
  CHECK(has(status.err, "vidline start --config"));

  auto wait = cli(dir, {"wait", "nosuch", "--config", config, "--timeout", "2"}, 20);
  INFO(wait.err);
  CHECK(wait.code == exit_code::unreachable);
  CHECK_FALSE(has(wait.err, "still running"));
  CHECK(has(wait.err, "no node answers"));

  auto resume = cli(dir, {"resume", "nosuch", "--config", config}, 40);
  INFO(resume.err);
  CHECK(resume.code == exit_code::unreachable);
}

TEST_CASE("plan refuses a count over its bound at once, naming the bound", "[cli][plan]") {
  temp_dir dir;
  auto started = std::chrono::steady_clock::now();
  auto r = cli(dir, {"plan", "--mode", "all", "--width", "416", "--height", "736", "--seconds",
                     "5", "--count", "10000000"}, 20);
  INFO(r.err);
  CHECK(r.code == exit_code::usage);
  CHECK(has(r.err, "at most 1000000 jobs"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  auto g = cli(dir, {"plan", "--mode", "all", "--width", "416", "--height", "736", "--seconds",
                     "5", "--count", "50000", "--gantt", dir.path() + "/g.svg"}, 20);
  INFO(g.err);
  CHECK(g.code == exit_code::usage);
  CHECK(has(g.err, "--gantt"));
}

TEST_CASE("with a line up: no such run (7), timeout (3), job failed (1), progress lines",
          "[cli][line]") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.01, json{{"max_attempts", 1}});
  auto cluster = vidline::config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  vidline::nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  std::ofstream(dir.path() + "/p.txt") << "exit codes test prompt";

  for (auto verb : {"wait", "status", "resume"}) {
    auto r = cli(dir, {verb, "20240101-000000-dead", "--config", config}, 20);
    INFO(verb << ": " << r.err);
    CHECK(r.code == exit_code::no_such_run);
    CHECK(has(r.err, "no run 20240101-000000-dead"));
  }

  // A run followed by `wait` from another process: its output is a file (no terminal), so
  // the progress comes as plain lines, one per change.
  auto bg = cli(dir, {"run", "--config", config, "--mode", "four_four_plus_one", "--prompt-file",
                      dir.path() + "/p.txt", "--width", "416", "--height", "736", "--seconds",
                      "5", "--count", "6", "--seed", "7", "--background"}, 30);
  INFO(bg.err);
  REQUIRE(bg.code == exit_code::ok);
  auto run_id = bg.out.substr(0, bg.out.find('\n'));

  auto quick = cli(dir, {"wait", run_id, "--config", config, "--timeout", "0.5"}, 20);
  INFO(quick.out << quick.err);
  CHECK(quick.code == exit_code::timeout);
  CHECK(has(quick.err, "still running"));

  auto waited = cli(dir, {"wait", run_id, "--config", config}, 120);
  INFO(waited.out << waited.err);
  CHECK(waited.code == exit_code::ok);
  std::vector<std::string> progress;
  std::istringstream lines(waited.out);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("run " + run_id + ": ", 0) == 0)
      progress.push_back(l);
  REQUIRE(progress.size() >= 2);
  CHECK(has(progress.front(), "/6 done"));
  CHECK(has(progress.back(), "6/6 done (6 succeeded, 0 failed)"));
  CHECK(has(progress.front(), "by the plan"));  // the ETA while jobs are left
  for (std::size_t i = 1; i < progress.size(); ++i)
    CHECK(progress[i] != progress[i - 1]);      // a line per change, not per poll
  for (auto& l : progress) {
    CHECK(has(l, " sampling, "));
    CHECK(has(l, " queued"));
  }

  // Every decode fails (its output directory is blocked by a file): wait exits 1. A seed
  // no earlier job had: the same shot again would reuse that job's video (job keys).
  auto outputs = dir.path() + "/host_b/outputs";
  std::filesystem::create_directories(outputs);
  auto bad = cli(dir, {"run", "--config", config, "--mode", "four_four_plus_one", "--prompt-file",
                       dir.path() + "/p.txt", "--width", "416", "--height", "736", "--seconds",
                       "5", "--count", "1", "--seed", "90", "--background"}, 30);
  REQUIRE(bad.code == exit_code::ok);
  auto bad_id = bad.out.substr(0, bad.out.find('\n'));
  std::ofstream(outputs + "/" + bad_id) << "in the way";
  auto failed = cli(dir, {"wait", bad_id, "--config", config}, 120);
  INFO(failed.out << failed.err);
  CHECK(failed.code == exit_code::job_failed);
  CHECK(has(failed.out, "1/1 done (0 succeeded, 1 failed)"));

  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

TEST_CASE("plan of a large batch runs in bounded memory, keeping only its summary", "[cli][plan]") {
  temp_dir dir;
  // 100,000 jobs in every mode under a 400 MiB address space: the plan used to keep four
  // stage records and a row per job in each mode (~420 MB resident, std::bad_alloc here);
  // above plan_detail_max_jobs it now keeps a summary only (~220 MB then; ~450 MB since jobs
  // carry their shot model, graph, review and energy fields: bounded, but to be slimmed).
  const std::string limit = "--as=" + std::to_string(768ull << 20);
  process p({"/usr/bin/prlimit", limit, VIDLINE_BINARY, "plan", "--mode", "all", "--width",
             "416", "--height", "736", "--seconds", "5", "--count", "100000", "--json"},
            dir.path() + "/plan.out");
  int code = p.wait(300);
  INFO(p.err());
  REQUIRE(code == exit_code::ok);
  auto j = json::parse(p.out());
  REQUIRE(j["modes"].size() >= 2);
  for (auto& m : j["modes"]) {
    CHECK(m["summary"]["succeeded"] == 100000);
    CHECK_FALSE(m.contains("jobs"));
    CHECK(m.contains("summary_only"));
  }
  CHECK(j["best"].is_string());
}
