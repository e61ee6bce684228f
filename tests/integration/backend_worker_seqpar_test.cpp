// The sequence-parallel worker example (backends/worker/examples/torch_seqpar.py) on the
// CPU with Debian's python3-torch: gloo, one process per rank.
// - Its latent is the same for 1 rank and for 2 ranks (and 4: padded tokens), the same seed.
// - A line whose pool has 2 GPUs runs it as 2 ranks: 3 jobs succeed, the first cold and
//   the others warm, every job sampled by the same two processes, whose latents match a
//   1-rank redo of the same seed and conditioning; once the node stops, no process of the
//   worker is left (/proc).
// - config/examples: every cluster file loads, and one_host_eight_gpus.json passes the
//   preflight checks that can run off its host, in both its modes.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "common/spawn/pid_records.hpp"
#include "backends/worker/worker_options.hpp"
#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/preflight.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::temp_dir;
using nlohmann::json;

namespace {

const std::string python = "/usr/bin/python3";
const std::string examples = std::string(VIDLINE_SOURCE_DIR) + "/backends/worker/examples/";
const std::string seqpar = examples + "torch_seqpar.py";
const std::string line_example = examples + "torch_line.py";

bool have_torch() {
  return std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

/// Runs a shell command; its stdout and exit status.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr)
    return {-1, ""};
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

const std::string small_model = "OMP_NUM_THREADS=1 VIDLINE_EXAMPLE_HIDDEN=32 VIDLINE_EXAMPLE_HEADS=4 ";

/// The largest absolute difference between two saved latents, or -1 if they do not load
/// or differ in shape.
double max_diff(const std::string& a, const std::string& b) {
  auto [rc, out] = run(python + " -c \"import torch,sys; a=torch.load(sys.argv[1]); b=torch.load(sys.argv[2]); "
                                "print('DIFF', (a-b).abs().max().item() if a.shape==b.shape else -1)\" '" +
                       a + "' '" + b + "'");
  INFO(out);
  auto at = out.find("DIFF ");
  if (rc != 0 || at == std::string::npos)
    return -1;
  return std::stod(out.substr(at + 5));
}

std::string once(const std::string& dir, int ranks, const std::string& extra = "") {
  std::string out = dir + "/once-" + std::to_string(ranks) + ".pt";
  auto [rc, text] = run(small_model + "timeout 120 " + python + " " + seqpar + " once output=" + out +
                        " seed=77 width=48 height=24 frames=9 ranks=" + std::to_string(ranks) + extra);
  INFO(text);
  REQUIRE(rc == 0);
  return out;
}

json gpu_entry(const std::string& id, int index) {
  return {{"id", id}, {"model", "Tesla T4"}, {"vendor", "nvidia"}, {"memory_gib", 16}, {"index", index}};
}

std::vector<json> trace(const std::string& dir) {
  std::vector<json> out;
  std::istringstream in(testing_support::read_file(dir + "/trace.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(json::parse(line));
  return out;
}

/// Live processes (not zombies) whose environment holds `marker` (NAME=value).
std::set<int> processes_with(const std::string& marker) {
  std::set<int> found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr)
    return found;
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0')
      continue;
    std::string env = testing_support::read_file("/proc/" + std::string(e->d_name) + "/environ");
    std::string needle = marker;
    needle.push_back('\0');
    if (env.find(needle) == std::string::npos)
      continue;
    auto st = spawn::read_proc_stat(static_cast<pid_t>(pid));
    if (st && st->state != 'Z' && st->state != 'X')
      found.insert(static_cast<int>(pid));
  }
  ::closedir(d);
  return found;
}

template <class Pred>
bool within(double seconds, Pred p) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (p())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return p();
}

} // namespace

TEST_CASE("seqpar example: the same latent with 1, 2 and 4 ranks") {
  if (!have_torch()) {
    WARN("python3-torch not installed: skipped");
    return;
  }
  temp_dir dir;
  auto one = once(dir.path(), 1);
  auto two = once(dir.path(), 2);
  auto four = once(dir.path(), 4);  // 9 tokens over 4 ranks: 3 padded, masked
  double d2 = max_diff(one, two), d4 = max_diff(one, four);
  CHECK(d2 >= 0);
  CHECK(d2 < 1e-4);
  CHECK(d4 >= 0);
  CHECK(d4 < 1e-4);
  // Heads that do not split over the ranks: a clear error, not a crash.
  auto [rc, text] = run(small_model + "VIDLINE_EXAMPLE_HEADS=3 timeout 120 " + python + " " + seqpar +
                        " once output=" + dir.path() + "/bad.pt seed=1 width=16 height=16 frames=1 ranks=2");
  CHECK(rc != 0);
  CHECK(text.find("cannot be split over 2 ranks") != std::string::npos);
}

TEST_CASE("seqpar line: a pool of 2 GPUs samples as 2 gloo ranks, cold once, nothing left after stop") {
  if (!have_torch()) {
    WARN("python3-torch not installed: skipped");
    return;
  }
  temp_dir dir;
  const std::string tr = dir.path() + "/trace.jsonl";
  const std::string keep = dir.path() + "/keep";
  std::filesystem::create_directories(keep);
  auto ports = testing_support::free_ports(1);
  json env = {{"VIDLINE_EXAMPLE_TRACE", tr}, {"VIDLINE_EXAMPLE_HIDDEN", "32"},
              {"VIDLINE_EXAMPLE_HEADS", "4"}, {"OMP_NUM_THREADS", "1"}};
  json seq_env = env;
  seq_env["VIDLINE_EXAMPLE_KEEP"] = keep;
  json cfg = {
    {"cluster", "seqpar_line"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir.path() + "/alpha"},
       {"gpus", {gpu_entry("g0", 0), gpu_entry("g1", 1), gpu_entry("g2", 2)}}}}},
    {"backends",
     {{"seqpar", {{"type", "worker"}, {"warm_start", false},  // its first job is the cold one
                  {"options", {{"argv", {python, seqpar, "worker"}}, {"env", seq_env}, {"stop_grace_s", 5}}}}},
      {"line", {{"type", "worker"},
                {"options", {{"argv", {python, line_example, "worker"}},
                             {"env", {{"VIDLINE_EXAMPLE_HIDDEN", "32"}, {"VIDLINE_EXAMPLE_DEPTH", "2"},
                                      {"OMP_NUM_THREADS", "1"}}},
                             {"stop_grace_s", 5}}}}}}},
    {"pools", {{{"name", "pair"}, {"host", "alpha"}, {"gpus", {"g0", "g1"}}, {"backend", "seqpar"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "alpha"}, {"gpu", "g2"}, {"backend", "line"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g2"}}, {"backend", "line"}}}},
    {"modes", {{"pair", {{"pools", {"pair"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 240}, {"decode_timeout_s", 240}}}};
  testing_support::add_keys(cfg, dir.path());
  auto config = dir.path() + "/cluster.json";
  std::ofstream(config) << cfg.dump(2);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  msg::submit_run req;
  req.mode = "pair";
  req.prompt = "two ranks, one fox";
  req.width = 32;
  req.height = 24;
  req.seconds = 1;
  req.count = 3;
  req.seed = 900;
  req.request_id = "seqpar-line";
  auto run_id = cl.submit(req);
  REQUIRE(!run_id.empty());
  json st = testing_support::wait_status(cl, run_id, 400, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  INFO(a->out() + a->err());
  INFO(testing_support::read_file(dir.path() + "/alpha/logs/backends/pair/worker.log"));
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 3);
  int cold = 0;
  for (auto& j : st["jobs"]) {
    CHECK(j["state"] == "succeeded");
    CHECK(j["pool"] == "pair");
    cold += j["cold"].get<bool>() ? 1 : 0;
  }
  CHECK(cold == 1);

  // The worker's trace: in order of sampling, the first cold, the rest warm, each by the
  // same 2 ranks.
  auto t = trace(dir.path());
  REQUIRE(t.size() == 3);
  std::sort(t.begin(), t.end(), [](const json& x, const json& y) { return x["start"] < y["start"]; });
  std::set<int> ranks;
  for (std::size_t i = 0; i < t.size(); ++i) {
    INFO(t[i].dump());
    CHECK(t[i]["cold"] == (i == 0));
    CHECK(t[i]["world"] == 2);
    CHECK(t[i]["ranks"] == t[0]["ranks"]);
    for (auto& p : t[i]["ranks"])
      ranks.insert(p.get<int>());
  }
  CHECK(ranks.size() == 2);

  // Each job's 2-rank latent is what 1 rank makes of the same seed and conditioning.
  for (auto& e : t) {
    std::string base = keep + "/seed-" + std::to_string(e["seed"].get<uint64_t>());
    std::string redo = base + ".redo.pt";
    auto [rc, text] = run(small_model + "timeout 120 " + python + " " + seqpar + " once output=" + redo +
                          " seed=" + std::to_string(e["seed"].get<uint64_t>()) +
                          " width=32 height=24 frames=25 ranks=1 conditioning=" + base + ".cond.pt");
    INFO(text);
    REQUIRE(rc == 0);
    double d = max_diff(base + ".pt", redo);
    CHECK(d >= 0);
    CHECK(d < 1e-4);
  }

  // Both ranks are alive between jobs (the check below can fail), and gone after stop.
  const std::string marker = "VIDLINE_EXAMPLE_TRACE=" + tr;
  auto live = processes_with(marker);
  for (int p : ranks)
    CHECK(live.count(p) == 1);
  a->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
  CHECK(within(10, [&] { return processes_with(marker).empty(); }));
  CHECK(processes_with(marker).empty());
}

TEST_CASE("config/examples: every cluster file loads and one_host_eight_gpus passes preflight") {
  const std::string dir = std::string(VIDLINE_SOURCE_DIR) + "/config/examples";
  int clusters = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json")
      continue;
    auto j = json::parse(testing_support::read_file(e.path().string()), nullptr, false);
    REQUIRE(!j.is_discarded());
    if (!j.is_object() || !j.contains("cluster"))
      continue;  // a workflow template, not a cluster
    INFO(e.path());
    CHECK_NOTHROW(config::load(e.path().string()));
    ++clusters;
  }
  CHECK(clusters >= 3);

  const std::string path = dir + "/one_host_eight_gpus.json";
  auto c = config::load(path);
  REQUIRE(c.hosts.size() == 2);  // the GPU host, and a decoding host as in the reference
  CHECK(c.hosts[0].gpus.size() == 8);
  std::map<std::string, std::size_t> pool_gpus;
  for (auto& p : c.pools)
    pool_gpus[p.name] = p.gpus.size();
  CHECK(pool_gpus == std::map<std::string, std::size_t>{{"eight", 8}, {"four_a", 4}, {"four_b", 4}});
  REQUIRE(c.find_mode("single_eight") != nullptr);
  REQUIRE(c.find_mode("four_four") != nullptr);
  CHECK(c.find_mode("single_eight")->pools == std::vector<std::string>{"eight"});
  CHECK(c.find_mode("four_four")->pools == std::vector<std::string>{"four_a", "four_b"});
  for (auto& p : c.pools) {
    auto* b = c.find_backend(p.backend);
    REQUIRE(b != nullptr);
    CHECK(b->type == "worker");
    auto o = backends::worker::parse_worker_options(b->name, b->options);
    REQUIRE(o.argv.size() >= 2);
    CHECK(o.argv[1].find("torch_seqpar.py") != std::string::npos);
  }
  for (const char* mode : {"single_eight", "four_four"}) {
    nodes::verbs::preflight_options po;
    po.config = path;
    po.mode = mode;
    po.before_start = true;
    po.timeout_s = 0.2;
    auto lines = nodes::verbs::run_preflight(po);
    INFO(nodes::verbs::format_report(lines));
    for (auto& l : lines)
      CHECK(l.status != nodes::verbs::check_line::level::fail);
  }
}
