// Real torch (Debian's python3-torch, CPU) through the worker backend: two node processes,
// every stage answered by a long-lived worker running backends/worker/examples/torch_line.py
// (a text encoder, a sampler, a decoder muxing H.264 into MP4 with ffmpeg). Checked end to
// end: every video probes as the job asked (ffprobe), each pool's first job is cold and the
// rest warm, one worker process per owner served them all, and progress was seen.
// A second case kills the node running a sample stage with SIGKILL, for an exec stage (its
// program a grandchild of the node) and for a worker: no stage process of the killed node
// is left once the restarted node runs, and no job is sampled or decoded twice.
// A third runs a chain of three segments on the worker line (the decoder on another host):
// the first_frame each link's worker was given is, byte for byte (by its SHA-256 as the
// worker hashed the file), its parent's last frame as this test decodes it with ffmpeg.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/spawn/pid_records.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::process;
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

/// Without a warm start: the first job of each pool is the cold one.
json worker_backend(const std::string& dir, double step_sleep_s) {
  return {{"type", "worker"},
          {"warm_start", false},
          {"options",
           {{"argv", {python, example, "worker"}},
            {"env", {{"VIDLINE_EXAMPLE_TRACE", dir + "/trace.jsonl"},
                     {"VIDLINE_EXAMPLE_STEP_SLEEP_S", std::to_string(step_sleep_s)},
                     {"VIDLINE_EXAMPLE_HIDDEN", "32"}, {"VIDLINE_EXAMPLE_DEPTH", "2"},
                     {"OMP_NUM_THREADS", "1"}}},
            {"cancel_grace_s", 2},
            {"stop_grace_s", 3}}}};
}

/// Samples through exec with the example's program as a *grandchild* of the node (a shell
/// in between), the case the parent-death signal alone cannot cover.
json exec_backend(const std::string& dir, double step_sleep_s) {
  std::string script = "VIDLINE_EXAMPLE_TRACE='" + dir + "/trace.jsonl' VIDLINE_EXAMPLE_STEP_SLEEP_S=" +
                       std::to_string(step_sleep_s) +
                       " VIDLINE_EXAMPLE_HIDDEN=32 VIDLINE_EXAMPLE_DEPTH=2 OMP_NUM_THREADS=1 " +
                       python + " \"$0\" exec sample \"$@\"; exit $?";
  return {{"type", "exec"},
          {"options",
           {{"sample",
             {{"argv", {"/bin/sh", "-c", script, example, "output={output}",
                        "conditioning={conditioning}", "seed={seed}", "width={width}",
                        "height={height}", "frames={frames}", "fps={fps}"}}}},
            {"kill_grace_s", 1}}}};
}

json gpu(const std::string& id, int index) {
  return {{"id", id}, {"model", "Tesla T4"}, {"vendor", "nvidia"}, {"memory_gib", 16}, {"index", index}};
}

/// alpha: coordinator, encoder, pools (`pools` of them, backend `pool_backend`); beta: the
/// decoder (a worker).
std::string write_config(const std::string& dir, const json& pool_backend, int pools) {
  auto ports = testing_support::free_ports(2);
  json pool_list = json::array(), names = json::array();
  for (int i = 0; i < pools; ++i) {
    std::string n = "p" + std::to_string(i);
    pool_list.push_back({{"name", n}, {"host", "alpha"}, {"gpus", {"g" + std::to_string(i)}},
                         {"backend", "pools"}});
    names.push_back(n);
  }
  json cfg = {
    {"cluster", "worker_line"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
       {"gpus", {gpu("g0", 0), gpu("g1", 1), gpu("g2", 2)}}},
      {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]}, {"data_dir", dir + "/beta"},
       {"gpus", {gpu("d0", 0)}}}}},
    {"backends", {{"pools", pool_backend}, {"line", worker_backend(dir, 0)}}},
    {"pools", pool_list},
    {"decoders", {{{"name", "dec"}, {"host", "beta"}, {"gpu", "d0"}, {"backend", "line"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g2"}}, {"backend", "line"}}}},
    {"modes", {{"all", {{"pools", names}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 240}, {"decode_timeout_s", 240}}}};
  testing_support::add_keys(cfg, dir);
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

std::string submit(nodes::verbs::coordinator_client& cl, uint32_t count, const std::string& request_id) {
  msg::submit_run req;
  req.mode = "all";
  req.prompt = "a tiny red fox, in torch";
  req.width = 32;
  req.height = 24;
  req.seconds = 1;
  req.count = count;
  req.seed = 4242;
  req.request_id = request_id;
  auto run_id = cl.submit(req);
  REQUIRE(!run_id.empty());
  return run_id;
}

/// ffprobe's view of a video's first stream.
json probe(const std::string& path) {
  std::string cmd = "ffprobe -v error -count_frames -show_entries "
                    "stream=codec_name,width,height,nb_read_frames -show_entries format=format_name "
                    "-of json '" + path + "' 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
      out.append(buf, n);
    ::pclose(f);
  }
  return json::parse(out, nullptr, false);
}

std::vector<json> trace(const std::string& dir) {
  std::vector<json> out;
  std::istringstream in(testing_support::read_file(dir + "/trace.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(json::parse(line));
  return out;
}

template <class Pred>
bool within(double seconds, Pred p) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (p())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return p();
}

bool alive(pid_t pid) {
  auto st = spawn::read_proc_stat(pid);
  return st && st->state != 'Z' && st->state != 'X';
}

void stop(process& a, process& b) {
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  CHECK(a.wait(30) == 0);
  CHECK(b.wait(30) == 0);
}

} // namespace

TEST_CASE("worker line: real torch samples and decodes to MP4, cold once per pool, warm after") {
  if (!have_torch()) {
    WARN("python3-torch or ffprobe not installed: skipped");
    return;
  }
  temp_dir dir;
  auto config = write_config(dir.path(), worker_backend(dir.path(), 0.3), 2);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));

  auto run_id = submit(cl, 5, "worker-line");
  bool saw_progress = false;
  json st = testing_support::wait_status(cl, run_id, 400, [&](const json& s) {
    for (auto& j : s["jobs"])
      if (j.contains("progress") && j["progress"].is_object() && j["progress"].value("steps", 0) > 0)
        saw_progress = true;
    return s["state"] != "running";
  });
  INFO(st.dump(2));
  INFO(a->out() + a->err());
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 5);
  std::map<std::string, int> cold_by_pool, jobs_by_pool;
  for (auto& j : st["jobs"]) {
    CHECK(j["state"] == "succeeded");
    auto pool = j["pool"].get<std::string>();
    ++jobs_by_pool[pool];
    cold_by_pool[pool] += j["cold"].get<bool>() ? 1 : 0;
    auto v = probe(j["output"].get<std::string>());
    INFO(j["output"] << ": " << v.dump());
    REQUIRE(v.is_object());
    REQUIRE(v["streams"].size() == 1);
    CHECK(v["streams"][0]["codec_name"] == "h264");
    CHECK(v["streams"][0]["width"] == 32);
    CHECK(v["streams"][0]["height"] == 24);
    CHECK(v["streams"][0]["nb_read_frames"] == "25");  // 1 s x 24 fps + 1
    CHECK(v["format"]["format_name"].get<std::string>().find("mp4") != std::string::npos);
  }
  for (auto& [pool, cold] : cold_by_pool)
    CHECK(cold == 1);  // its first job loaded the model; the others found it loaded
  // One worker process per owner served every stage of it.
  std::map<std::string, std::set<int>> pids;
  for (auto& t : trace(dir.path()))
    pids[t["owner"].get<std::string>()].insert(t["pid"].get<int>());
  for (auto& [owner, set] : pids)
    CHECK(set.size() == 1);
  CHECK(pids.count("dec") == 1);
  CHECK(saw_progress);
  stop(*a, *b);
  // The workers ended with their nodes.
  for (auto& [owner, set] : pids)
    for (int pid : set)
      CHECK_FALSE(alive(pid));
}

TEST_CASE("a node SIGKILLed mid-stage leaves no stage process, and nothing is done twice") {
  if (!have_torch()) {
    WARN("python3-torch or ffprobe not installed: skipped");
    return;
  }
  auto kind = GENERATE(std::string("exec"), std::string("worker"));
  INFO("pool backend: " << kind);
  temp_dir dir;
  // One pool: exactly one sample runs at a time, so the one cut is the one running.
  json pool = kind == "exec" ? exec_backend(dir.path(), 1.0) : worker_backend(dir.path(), 1.0);
  auto config = write_config(dir.path(), pool, 1);
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  auto run_id = submit(cl, 2, "kill-" + kind);

  // Wait for a sample to be mid-steps, then SIGKILL its node.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  json begun;
  while (begun.is_null()) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    for (auto& t : trace(dir.path()))
      if (t["stage"] == "sample" && t["phase"] == "begin")
        begun = t;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  a->signal(SIGKILL);
  a->wait(10);
  pid_t cut = begun["pid"].get<int>();
  if (kind == "worker")  // the node's child: the parent-death signal ends it at once
    CHECK(within(5, [&] { return !alive(cut); }));
  CHECK(trace(dir.path()).size() >= 1);

  // The restarted node ends what is left before it starts a stage again.
  auto a2 = testing_support::start_node(dir.path(), config, "alpha");
  REQUIRE(testing_support::coordinator_answers(cl, 60));
  bool overlapped = false;
  json st = testing_support::wait_status(cl, run_id, 400, [&](const json& s) {
    // While the restarted node samples again, the cut process must be gone.
    for (auto& t : trace(dir.path()))
      if (t["stage"] == "sample" && t["phase"] == "begin" && t["pid"] != begun["pid"] && alive(cut))
        overlapped = true;
    return s["state"] != "running";
  });
  INFO(st.dump(2));
  INFO(a2->out() + a2->err());
  CHECK_FALSE(overlapped);
  CHECK_FALSE(alive(cut));
  REQUIRE(st["state"] == "succeeded");
  // Nothing done twice: each job's sample completed once (the cut one never did), and each
  // was decoded once.
  std::map<uint64_t, int> sampled, decoded;
  for (auto& t : trace(dir.path()))
    if (t["phase"] == "end" && t["stage"] == "sample")
      ++sampled[t["seed"].get<uint64_t>()];
    else if (t["phase"] == "end" && t["stage"] == "decode")
      ++decoded[t["seed"].get<uint64_t>()];
  CHECK(sampled.size() == 2);
  CHECK(decoded.size() == 2);
  for (auto& [seed, n] : sampled)
    CHECK(n == 1);
  for (auto& [seed, n] : decoded)
    CHECK(n == 1);
  for (auto& [idx, n] : testing_support::ledger_counts({dir.path() + "/alpha"}, run_id, "sampled"))
    CHECK(n == 1);
  // No process of the killed node's life is left in its recorded groups.
  CHECK(std::filesystem::is_directory(dir.path() + "/alpha/pids"));
  stop(*a2, *b);
}

namespace {

/// alpha: coordinator, encoder and one pool; beta: the decoder; every stage a torch worker
/// whose one workflow takes a `first_frame`.
std::string write_chain_config(const std::string& dir) {
  auto ports = testing_support::free_ports(2);
  json line = worker_backend(dir, 0);
  line["workflows"] = {{{"name", "i2v"}, {"model", "torch-i2v"}, {"default", true},
                        {"inputs", {{"first_frame", {{"required", false}}}}}}};
  json cfg = {
    {"cluster", "worker_chain"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
       {"gpus", {gpu("g0", 0), gpu("g1", 1)}}},
      {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]}, {"data_dir", dir + "/beta"},
       {"gpus", {gpu("d0", 0)}}}}},
    {"backends", {{"line", line}}},
    {"pools", {{{"name", "p0"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "line"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "beta"}, {"gpu", "d0"}, {"backend", "line"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g1"}}, {"backend", "line"}}}},
    {"modes", {{"all", {{"pools", {"p0"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 240}, {"decode_timeout_s", 240}}}};
  testing_support::add_keys(cfg, dir);
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// Frame `k` of `video` as PNG, decoded here with ffmpeg as a user would.
std::string frame_png(const std::string& dir, const std::string& video, int k) {
  const std::string png = dir + "/expected-" + std::to_string(k) + "-"
                          + std::filesystem::path(video).stem().string() + ".png";
  process ff({"ffmpeg", "-v", "error", "-nostdin", "-y", "-i", video, "-vf",
              "select=eq(n\\," + std::to_string(k) + ")", "-frames:v", "1", "-f", "image2",
              "-c:v", "png", png},
             png + ".out");
  REQUIRE(ff.wait(60) == 0);
  return testing_support::read_file(png);
}

} // namespace

TEST_CASE("worker line: a chain of segments, each link's first_frame its parent's last frame") {
  if (!have_torch()) {
    WARN("python3-torch or ffprobe not installed: skipped");
    return;
  }
  temp_dir dir;
  auto config = write_chain_config(dir.path());
  auto cluster = config::load(config);
  auto a = testing_support::start_node(dir.path(), config, "alpha");
  auto b = testing_support::start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  // Three 1 s links of 32x24: l2 starts on l1's last frame, l3 on l2's.
  std::string list;
  for (int k = 1; k <= 3; ++k) {
    json s = {{"prompt", "a fox walks, part " + std::to_string(k)}, {"width", 32},
              {"height", 24}, {"seconds", 1}, {"seed", 70 + k}, {"name", "l" + std::to_string(k)}};
    if (k > 1)
      s["inputs"] = {{"first_frame", {{"from", "l" + std::to_string(k - 1)}, {"frame", "last"}}}};
    list += s.dump() + "\n";
  }
  std::ofstream(dir.path() + "/chain.jsonl") << list;
  const std::string out = dir.path() + "/out";
  process run({VIDLINE_BINARY, "run", "--config", config, "--mode", "all", "--jobs",
               dir.path() + "/chain.jsonl", "--collect", out, "--json"},
              dir.path() + "/run.out");
  const int rc = run.wait(400);
  INFO(run.err());
  REQUIRE(rc == 0);
  auto st = *cl.status(json::parse(run.out())["run_id"].get<std::string>(), 5000);
  INFO(st.dump(2));
  std::map<std::string, json> jobs;
  for (auto& j : st["jobs"])
    jobs[j["shot"].get<std::string>()] = j;
  REQUIRE(jobs.size() == 3);
  for (auto& [shot, j] : jobs)
    REQUIRE(j["state"] == "succeeded");
  // What each sample stage was given, as the worker hashed it: by the job's seed.
  std::map<uint64_t, json> given;
  for (auto& t : trace(dir.path()))
    if (t["stage"] == "sample" && t["phase"] == "end")
      given[t["seed"].get<uint64_t>()] = t["inputs"];
  REQUIRE(given.size() == 3);
  CHECK(given[71].empty());  // the head took no frame
  for (auto [child, parent] : {std::pair{"l2", "l1"}, std::pair{"l3", "l2"}}) {
    INFO(child << " takes from " << parent);
    // The parent's last frame (24 of 25), decoded here from its collected MP4.
    const std::string video =
      out + "/" + std::filesystem::path(jobs[parent]["output"].get<std::string>()).filename().string();
    CHECK(to_hex(sha256_of(testing_support::read_file(video))) == jobs[parent]["output_sha256"]);
    const std::string expected = frame_png(dir.path(), video, 24);
    REQUIRE_FALSE(expected.empty());
    const std::string digest = to_hex(sha256_of(expected));
    CHECK(jobs[child]["inputs"]["first_frame"] == digest);
    CHECK(given[jobs[child]["seed"].get<uint64_t>()].value("first_frame", "") == digest);
    CHECK(jobs[child]["times"]["sample_start_s"].get<double>()
          >= jobs[parent]["times"]["decode_end_s"].get<double>());
  }
  CHECK(jobs["l1"]["output_sha256"] != jobs["l2"]["output_sha256"]);
  stop(*a, *b);
}
