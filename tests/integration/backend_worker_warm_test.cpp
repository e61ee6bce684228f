// A warm start with real torch (Debian's python3-torch, CPU): two node processes, the pool's
// sampler a long-lived worker running backends/worker/examples/torch_line.py, whose backend
// has warm_start (the default). Checked end to end: the worker loaded its model when the
// node started, before its first request, so the first job (and every one after it) is
// warm; each result names the model and the identity of its weights, and that identity
// reaches the status JSON, the run's index.jsonl and the cluster view's pool.
#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>

#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::temp_dir;
using nlohmann::json;

namespace {

const std::string python = "/usr/bin/python3";
const std::string example =
  std::string(VIDLINE_SOURCE_DIR) + "/backends/worker/examples/torch_line.py";

bool have_torch() {
  return std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0 &&
         std::system("ffprobe -version >/dev/null 2>&1") == 0;
}

json worker_backend(const std::string& dir) {
  return {{"type", "worker"},
          {"workflows", {{{"name", "fox"}, {"model", "fox-mlp-v1"}, {"default", true}}}},
          {"options",
           {{"argv", {python, example, "worker"}},
            {"env", {{"VIDLINE_EXAMPLE_TRACE", dir + "/trace.jsonl"},
                     {"VIDLINE_EXAMPLE_HIDDEN", "32"}, {"VIDLINE_EXAMPLE_DEPTH", "2"},
                     {"OMP_NUM_THREADS", "1"}}},
            {"stop_grace_s", 3}}}};
}

json gpu(const std::string& id, int index) {
  return {{"id", id}, {"model", "Tesla T4"}, {"vendor", "nvidia"}, {"memory_gib", 16}, {"index", index}};
}

/// alpha: coordinator, encoder, pool p0 (backend "pools", warm start by default); beta:
/// the decoder. Encoder and decoder use "line", without a warm start.
std::string write_config(const std::string& dir) {
  auto ports = testing_support::free_ports(2);
  json line = worker_backend(dir);
  line.erase("workflows");
  line["warm_start"] = false;
  json cfg = {
    {"cluster", "worker_warm"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
       {"gpus", {gpu("g0", 0), gpu("g2", 2)}}},
      {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]}, {"data_dir", dir + "/beta"},
       {"gpus", {gpu("d0", 0)}}}}},
    {"backends", {{"pools", worker_backend(dir)}, {"line", line}}},
    {"pools", {{{"name", "p0"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "pools"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "beta"}, {"gpu", "d0"}, {"backend", "line"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g2"}}, {"backend", "line"}}}},
    {"modes", {{"all", {{"pools", {"p0"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 240}, {"decode_timeout_s", 240}}}};
  testing_support::add_keys(cfg, dir);
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

std::vector<json> trace(const std::string& dir) {
  std::vector<json> out;
  std::istringstream in(testing_support::read_file(dir + "/trace.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(json::parse(line));
  return out;
}

} // namespace

TEST_CASE("worker warm start: the model loads at node start, the first job is warm, its identity is recorded") {
  if (!have_torch()) {
    WARN("python3-torch or ffprobe not installed: skipped");
    return;
  }
  temp_dir dir;
  auto config = write_config(dir.path());
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  // Submitted at once: the first order may come while the worker still loads, and then
  // waits for the load rather than going first.
  msg::submit_run req;
  req.mode = "all";
  req.prompt = "a tiny red fox, warm";
  req.width = 32;
  req.height = 24;
  req.seconds = 1;
  req.count = 2;
  req.seed = 77;
  req.request_id = "warm-start";
  auto run_id = cl.submit(req);
  REQUIRE(!run_id.empty());
  json st = testing_support::wait_status(cl, run_id, 400,
                                         [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  INFO(a->out() + a->err());
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 2);

  // The worker of p0 loaded "sample" once, before its first sample began.
  double load_end = -1, first_begin = -1;
  int loads = 0;
  for (auto& t : trace(dir.path())) {
    if (t["owner"] != "p0")
      continue;
    if (t["phase"] == "load") {
      ++loads;
      CHECK(first_begin < 0);  // the load came before any request
      load_end = t["end"].get<double>();
    } else if (t["phase"] == "begin" && first_begin < 0) {
      first_begin = t["start"].get<double>();
      CHECK(t["cold"] == false);
    }
  }
  CHECK(loads == 1);
  REQUIRE(load_end > 0);
  REQUIRE(first_begin > 0);
  CHECK(load_end <= first_begin);

  // Every job warm, the first included, and each names the model's identity.
  const std::regex digest("sha256:[0-9a-f]{64}");
  std::string identity;
  for (auto& j : st["jobs"]) {
    CHECK(j["state"] == "succeeded");
    CHECK(j["cold"] == false);
    CHECK(j["model"] == "fox-mlp-v1");
    REQUIRE(j["model_identity"].is_string());
    identity = j["model_identity"].get<std::string>();
    CHECK(std::regex_match(identity, digest));
    CHECK_FALSE(j.contains("sampled_model"));  // the worker had the job's model
  }
  CHECK(st["jobs"][0]["model_identity"] == st["jobs"][1]["model_identity"]);

  // The run's index on the decoder's host says it for each video.
  std::vector<std::string> repeated;
  auto index = testing_support::read_index(dir.path() + "/beta/outputs/" + run_id + "/index.jsonl",
                                           repeated);
  CHECK(index.size() == 2);
  for (auto& [name, line] : index) {
    INFO(line.dump());
    CHECK(line["model"] == "fox-mlp-v1");
    CHECK(line["model_identity"] == identity);
  }

  // The cluster view shows the pool's loaded model.
  auto c = cl.status("@cluster", 5000);
  REQUIRE(c);
  INFO(c->dump(2));
  CHECK((*c)["pools"]["p0"]["model"] == "fox-mlp-v1");
  CHECK((*c)["pools"]["p0"]["model_identity"] == identity);

  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
  CHECK(b->wait(30) == 0);
}
