// Two real node processes run a batch through the exec backend: every conditioning,
// latent and video file is made by a child process (tests/support/programs/sim_*.sh),
// and the test checks each against the sim contract, recomputing latents itself.
// A second case: one pool's program always runs out of memory, so its jobs move to the
// other pool (capacity is a limit of the pool kind, not a transient fault).
#include <catch2/catch.hpp>

#include <set>

#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/contract.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::process;
using testing_support::temp_dir;
using nlohmann::json;
using testing_support::start_node;
using testing_support::coordinator_answers;
using testing_support::contract_problem;

namespace {

const std::string programs = std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/";

json sim_programs() {
  return {{"encode", {{"argv", {programs + "sim_conditioning.sh", "{prompt_file}", "{output}"}}}},
          {"sample", {{"argv", {programs + "sim_latent.sh", "{seed}", "{width}", "{height}",
                                "{seconds}", "{output}", "{conditioning}", "{prompt_file}"}}}},
          {"decode", {{"argv", {programs + "sim_video.sh", "{latent}", "{latent_sha256}", "{seed}",
                                "{width}", "{height}", "{seconds}", "{output}"}}}},
          {"kill_grace_s", 1}};
}

json gpu(const std::string& id, const std::string& model, int index) {
  return {{"id", id}, {"model", model}, {"vendor", "nvidia"}, {"memory_gib", 16}, {"index", index}};
}

/// alpha: coordinator, encoder, pools `left` (2 x T10, backend `left_backend`) and `right`
/// (1 x T4); beta: the decoder. Every backend runs the sim programs unless overridden.
std::string write_config(const std::string& dir, const json& left_backend) {
  auto ports = testing_support::free_ports(2);
  json cfg = {
    {"cluster", "exec_line"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
       {"gpus", {gpu("g0", "Tesla T10", 0), gpu("g1", "Tesla T10", 1), gpu("g2", "Tesla T4", 2)}}},
      {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]}, {"data_dir", dir + "/beta"},
       {"gpus", {gpu("d0", "RTX 3080 Ti", 0)}}}}},
    {"backends",
     {{"programs", {{"type", "exec"}, {"options", sim_programs()}}}, {"left_programs", left_backend}}},
    {"pools",
     {{{"name", "left"}, {"host", "alpha"}, {"gpus", {"g0", "g1"}}, {"backend", "left_programs"}},
      {{"name", "right"}, {"host", "alpha"}, {"gpus", {"g2"}}, {"backend", "programs"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "beta"}, {"gpu", "d0"}, {"backend", "programs"}}}},
    {"encoders", {{{"name", "enc"}, {"host", "alpha"}, {"gpus", {"g0"}}, {"backend", "programs"}}}},
    {"modes", {{"both", {{"pools", {"left", "right"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 60}, {"decode_timeout_s", 60}}}};
  testing_support::add_keys(cfg, dir);
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// Runs a batch and returns the final status JSON.
json run_batch(nodes::verbs::coordinator_client& cl, process& a, process& b, uint32_t count,
               const std::string& request_id) {
  msg::submit_run req;
  req.mode = "both";
  req.prompt = "exec line prompt: \"quotes\", $(not a shell) and a newline\nend";
  req.width = 24;
  req.height = 16;
  req.seconds = 2;
  req.count = count;
  req.seed = 987654321123ull;
  req.request_id = request_id;
  auto run_id = cl.submit(req);
  REQUIRE(!run_id.empty());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    auto s = cl.status(run_id, 2000);
    if (s && (*s)["state"] != "running")
      return *s;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    REQUIRE(a.running());
    REQUIRE(b.running());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // status polling pace
  }
}

void stop(process& a, process& b) {
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  CHECK(a.wait(20) == 0);
  CHECK(b.wait(20) == 0);
}

} // namespace

TEST_CASE("two nodes run a batch through exec: child processes make every file, per the contract") {
  temp_dir dir;
  json left = {{"type", "exec"}, {"options", sim_programs()}};
  auto config = write_config(dir.path(), left);
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  json st = run_batch(cl, *a, *b, 6, "exec-line");
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  CHECK(st["clock"]["simulated"] == false);
  REQUIRE(st["jobs"].size() == 6);
  std::set<std::string> pools;
  for (auto& j : st["jobs"]) {
    CHECK(contract_problem(j, 1) == "");
    CHECK(j["attempts"] == 1);
    pools.insert(j["pool"].get<std::string>());
    // The decoder's child wrote the video file on beta; its log is beside the node's.
    CHECK(j["output"].get<std::string>().rfind(dir.path() + "/beta/outputs/", 0) == 0);
  }
  CHECK(pools == std::set<std::string>{"left", "right"});
  // One conditioning for the one prompt, made by the encode program.
  std::size_t logs = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path() + "/alpha/logs/backends/left"))
    logs += e.path().string().find("-sample-") != std::string::npos;
  CHECK(logs >= 2);  // stdout + stderr of at least one job
  CHECK(std::filesystem::exists(dir.path() + "/beta/logs/backends/dec"));
  stop(*a, *b);
}

TEST_CASE("exec: a pool whose program runs out of memory hands its jobs to the other pool") {
  temp_dir dir;
  json oom = sim_programs();
  oom["sample"]["argv"] = {programs + "fake_stage.sh", "oom", "{output}"};
  json left = {{"type", "exec"}, {"options", oom}};
  auto config = write_config(dir.path(), left);
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  json st = run_batch(cl, *a, *b, 4, "exec-oom");
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  for (auto& j : st["jobs"]) {
    CHECK(contract_problem(j, 1) == "");
    CHECK(j["pool"] == "right");
  }
  stop(*a, *b);
}
