// kill -9 of the sampling node mid-sample (two real node processes on loopback, sim line,
// checkpoints every few steps): the job resumes on another host's pool of the same kind
// from the newest checkpoint it saved, pulled by digest from the restarted node's latent
// store, instead of sampling again from step 0. Its latent is the uninterrupted one's (the
// sim contract), the GPU time paid twice is at most about one checkpoint interval plus the
// attempt's start (far less than the stage so far), and the checkpoints are removed from
// both hosts once the latent is made.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "config/config.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;
using testing_support::temp_dir;
namespace fs = std::filesystem;

namespace {

/// Run-clock seconds between checkpoints (about 4 of the sim's 30 steps of a warm
/// 416x736x5 sample on 4 x T10, 75 s).
constexpr double interval_s = 10;
constexpr double time_scale = 0.1;

/// The reference line plus a second 4 x T10 pool on host_b ("four_c", the same kind as
/// host_a's "four_a") and a mode of those two pools and host_a's decoder.
std::string write_config(const std::string& dir) {
  const auto path = testing_support::write_reference_config(
    dir, time_scale,
    {{"heartbeat_interval_ms", 500}, {"heartbeat_misses", 3}, {"status_interval_ms", 250},
     {"lease_ms", 4000}, {"checkpoint_interval_s", interval_s}});
  auto cfg = json::parse(testing_support::read_file(path));
  for (auto& h : cfg["hosts"])
    if (h["name"] == "host_b")
      for (int g = 0; g < 4; ++g)
        h["gpus"].push_back({{"id", "t10-b" + std::to_string(g)}, {"model", "Tesla T10"},
                             {"vendor", "nvidia"}, {"memory_gib", 16}, {"index", 1 + g}});
  cfg["pools"].push_back({{"name", "four_c"}, {"host", "host_b"},
                          {"gpus", {"t10-b0", "t10-b1", "t10-b2", "t10-b3"}},
                          {"backend", "sim"}, {"profile", "t10x4"}});
  cfg["modes"]["resume_line"] = {{"pools", {"four_a", "four_c"}}, {"decoders", {"t10_a"}}};
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// `vidline ARGS... --config CONFIG`; its exit code.
int cli(const std::string& dir, const std::string& config, std::vector<std::string> args) {
  static int n = 0;
  args.insert(args.begin(), VIDLINE_BINARY);
  args.push_back("--config");
  args.push_back(config);
  testing_support::process p(args, dir + "/cli." + std::to_string(n++) + ".out");
  return p.wait(60);
}

/// The checkpoints a host's latent store holds (notes saying "checkpoint").
int checkpoints_held(const std::string& data_dir) {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(data_dir + "/latents", ec), end; !ec && it != end;
       it.increment(ec))
    if (it->path().extension() == ".job"
        && testing_support::read_file(it->path().string()).find(" checkpoint ")
             != std::string::npos)
      ++n;
  return n;
}

} // namespace

TEST_CASE("kill -9 of the sampling node: the job resumes on another host's pool from its "
          "checkpoint, same latent",
          "[checkpoint]") {
  temp_dir dir("vl-ckpt-kill");
  const auto config = write_config(dir.path());
  auto cluster = config::load(config);
  std::map<std::string, std::unique_ptr<testing_support::process>> nodes;
  for (const char* h : {"host_a", "host_b"})
    nodes[h] = testing_support::start_node(dir.path(), config, h);
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(testing_support::coordinator_answers(cl, 30));
  REQUIRE(testing_support::line_reported(cl, 30));

  // The job starts on host_b's pool: host_a's is drained until then.
  REQUIRE(cli(dir.path(), config, {"drain", "pool", "four_a"}) == 0);
  std::ofstream(dir.path() + "/one.jsonl")
    << json{{"prompt", "a fox in the snow"}, {"width", 416}, {"height", 736}, {"seconds", 5},
            {"seed", 77}, {"name", "fox"}}
         .dump()
    << "\n";
  const auto run_id = testing_support::submit_shot_list(dir.path(), config, "resume_line",
                                                        dir.path() + "/one.jsonl");

  // Half-way through its steps, with a checkpoint saved: kill -9 its node.
  auto mid = testing_support::wait_status(cl, run_id, 120, [](const json& s) {
    auto& j = s["jobs"][0];
    return s["state"] != "running"
           || (j["state"] == "sampling" && j["checkpoint"].is_object()
               && j["checkpoint"]["step"].get<int>() >= 12);
  });
  INFO(mid.dump().substr(0, 3000));
  REQUIRE(mid["state"] == "running");
  const auto& before = mid["jobs"][0];
  REQUIRE(before["pool"] == "four_c");
  REQUIRE(before["checkpoint"]["host"] == "host_b");
  const int saved_step = before["checkpoint"]["step"].get<int>();
  const int progress_step =
    before["progress"].is_object() ? before["progress"]["step"].get<int>() : saved_step;
  nodes["host_b"]->signal(SIGKILL);
  nodes["host_b"]->wait(10);

  // The operator moves the work off the pool that failed; its host comes back, its latent
  // store serves the checkpoint to host_a's pool.
  REQUIRE(cli(dir.path(), config, {"drain", "pool", "four_c"}) == 0);
  REQUIRE(cli(dir.path(), config, {"undrain", "pool", "four_a"}) == 0);
  nodes["host_b"] = testing_support::start_node(dir.path(), config, "host_b");

  auto st = testing_support::wait_status(cl, run_id, 180,
                                         [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump().substr(0, 4000));
  REQUIRE(st["state"] == "succeeded");
  const auto& j = st["jobs"][0];
  CHECK(testing_support::contract_problem(j) == "");
  CHECK(j["pool"] == "four_a");
  CHECK(j["latent_host"] == "host_a");
  // It went on from the checkpoint seen before the kill, or a newer one.
  CHECK(j["resumed_from_step"].get<int>() >= saved_step);
  CHECK(j["resumed_from_step"].get<int>() <= progress_step + 1);
  CHECK(j["done_twice"] == 0);
  // Paid twice: the steps after the checkpoint and the attempt's start (its host's silence
  // until the lease ended counts too), far less than the stage so far (its model's load,
  // 45 s, and the 12+ steps of 2.5 s each before the checkpoint, on 4 GPUs).
  const double paid = j["gpu_s_paid_twice"].get<double>();
  const double stage_so_far_gpu_s = 4 * (45 + 2.5 * saved_step);
  INFO("gpu_s_paid_twice " << paid << ", the stage so far " << stage_so_far_gpu_s);
  CHECK(paid < stage_so_far_gpu_s);
  CHECK(st["summary"]["done_twice"] == 0);

  // The resuming pool pulled the checkpoint from host_b and said so.
  const std::string log_a = testing_support::read_file(dir.path() + "/host_a/logs/node.log");
  CHECK(log_a.find("pulled from host_b") != std::string::npos);
  CHECK(log_a.find("resumes from step") != std::string::npos);

  // Once the latent is made its checkpoints are released on both hosts.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((checkpoints_held(dir.path() + "/host_a") + checkpoints_held(dir.path() + "/host_b")) > 0
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // release pace
  CHECK(checkpoints_held(dir.path() + "/host_a") == 0);
  CHECK(checkpoints_held(dir.path() + "/host_b") == 0);

  for (auto& [h, n] : nodes)
    n->signal(SIGTERM);
  for (auto& [h, n] : nodes)
    n->wait(30);
}
