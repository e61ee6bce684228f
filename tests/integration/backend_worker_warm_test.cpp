// A warm start with real torch (Debian's python3-torch, CPU): two node processes, the pool's
// sampler, the encoder and the decoder each a long-lived worker running
// backends/worker/examples/torch_line.py, whose backends have warm_start (the default).
// Checked end to end: each worker loaded its model when its node started, before its first
// request, so the first job's conditioning, sampling and decode (and every one after them)
// are warm; each result names the model and the identity of its weights, and that identity
// reaches the status JSON, the run's index.jsonl and the cluster view's pool. Without the
// warm start, the encoder's and decoder's first stages are the cold ones.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <regex>

#include "actors/warm_start.hpp"
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
/// the decoder. Encoder and decoder use "line" (no workflows of its own), warm at start
/// unless `line_warm` is false.
std::string write_config(const std::string& dir, bool line_warm = true) {
  auto ports = testing_support::free_ports(2);
  json line = worker_backend(dir);
  line.erase("workflows");
  if (!line_warm)
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

/// Per owner of the trace: its loads, when the last of them ended, when its first stage's
/// work began, and whether each of its stages was cold, in order.
struct owner_trace {
  int loads = 0;
  double load_end = -1;
  double first_start = -1;
  std::vector<bool> cold;
};

std::map<std::string, owner_trace> by_owner(const std::vector<json>& t) {
  std::map<std::string, owner_trace> out;
  for (auto& e : t) {
    auto& o = out[e["owner"].get<std::string>()];
    if (e["phase"] == "load") {
      ++o.loads;
      o.load_end = e["end"].get<double>();
    } else if (e["phase"] == "end") {
      if (o.first_start < 0)
        o.first_start = e["start"].get<double>();
      o.cold.push_back(e["cold"].get<bool>());
    }
  }
  return out;
}

/// What a run of the line left: its status and the cluster view at its end.
struct line_run {
  json status;
  json cluster;
};

/// Starts both nodes of the config in `dir`, submits two jobs of one prompt at once (the
/// first orders may come while the workers still load, and then wait for their loads
/// rather than going first), waits for the run's end and stops the nodes.
void run_line(const std::string& dir, const std::string& config, line_run& out) {
  json& st = out.status;
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir, config, "alpha");
  auto b = testing_support::start_node(dir, config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
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
  st = testing_support::wait_status(cl, run_id, 400,
                                    [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  INFO(a->out() + a->err());
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 2);
  auto c = cl.status("@cluster", 5000);
  REQUIRE(c);
  out.cluster = *c;
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
  CHECK(b->wait(30) == 0);
}

} // namespace

TEST_CASE("worker warm start: the model loads at node start, the first job is warm, its identity is recorded") {
  if (!have_torch()) {
    WARN("python3-torch or ffprobe not installed: skipped");
    return;
  }
  temp_dir dir;
  auto config = write_config(dir.path());
  line_run run;
  run_line(dir.path(), config, run);
  const json& st = run.status;
  INFO(st.dump(2));
  const std::string run_id = st["run_id"].get<std::string>();

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
  INFO(run.cluster.dump(2));
  CHECK(run.cluster["pools"]["p0"]["model"] == "fox-mlp-v1");
  CHECK(run.cluster["pools"]["p0"]["model_identity"] == identity);

  // The encoder and the decoder loaded theirs at start too, once each and before their
  // first stage, so the first conditioning and the first decode were warm like the rest.
  auto owners = by_owner(trace(dir.path()));
  for (const char* name : {"enc", "dec"}) {
    INFO(name);
    const auto& o = owners[name];
    CHECK(o.loads == 1);
    REQUIRE(o.load_end > 0);
    REQUIRE(o.first_start > 0);
    CHECK(o.load_end <= o.first_start);
    REQUIRE_FALSE(o.cold.empty());
    for (bool c : o.cold)
      CHECK_FALSE(c);
  }
  CHECK(owners["enc"].cold.size() == 1);  // one prompt, encoded once
  CHECK(owners["dec"].cold.size() == 2);
}

TEST_CASE("worker warm start off for the encoder's and decoder's backend: their first stages load the model") {
  if (!have_torch()) {
    WARN("python3-torch or ffprobe not installed: skipped");
    return;
  }
  temp_dir dir;
  auto config = write_config(dir.path(), false);
  line_run run;
  run_line(dir.path(), config, run);
  auto owners = by_owner(trace(dir.path()));
  CHECK(owners["p0"].loads == 1);  // the pool's backend still warms
  for (bool c : owners["p0"].cold)
    CHECK_FALSE(c);
  for (const char* name : {"enc", "dec"}) {
    INFO(name);
    const auto& o = owners[name];
    CHECK(o.loads == 1);
    REQUIRE(o.cold.size() >= 1);
    CHECK(o.cold.front());  // its load ran for its first stage
    for (std::size_t k = 1; k < o.cold.size(); ++k)
      CHECK_FALSE(o.cold[k]);
  }
}

TEST_CASE("a decoder on a pool's GPU does not warm at start, one on a GPU of its own does", "[config]") {
  temp_dir dir;
  auto cluster = config::load(write_config(dir.path()));
  REQUIRE(cluster.decoders.size() == 1);
  CHECK(actors::decoder_warms_at_start(cluster, cluster.decoders[0]));
  auto shared = cluster.decoders[0];
  shared.host = "alpha";
  shared.gpu = "g0";  // p0's GPU
  CHECK_FALSE(actors::decoder_warms_at_start(cluster, shared));
  cluster.backends.at("line").warm_start = false;
  CHECK_FALSE(actors::decoder_warms_at_start(cluster, cluster.decoders[0]));
  CHECK(actors::default_model_key(cluster) == "fox-mlp-v1");
}
