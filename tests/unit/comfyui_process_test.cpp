// Backend processes: a supervised process is started, found ready, restarted when it dies,
// given up on past its restart budget, and stopped with its owner; the ComfyUI spec gives
// each instance its own port, directories, database and short runtime directory. Last, a
// comfyui pool that owns its "ComfyUI" (this test binary serving the test server, started
// as a child) survives a kill -9 of it mid-prompt.

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "backends/backend.hpp"
#include "backends/comfyui/comfyui_options.hpp"
#include "common/spawn/child.hpp"
#include "backends/process/backend_process.hpp"
#include "backends/process/socket_paths.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "tests/support/comfyui_server.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::backends;
using json = nlohmann::json;
using testing_support::temp_dir;

namespace {

/// When started with VIDLINE_TEST_FAKE_COMFYUI_PORT set, this binary is a "ComfyUI": the
/// test server on that port until it is killed (it never reaches Catch's main).
struct fake_comfyui {
  fake_comfyui() {
    const char* port = std::getenv("VIDLINE_TEST_FAKE_COMFYUI_PORT");
    const char* root = std::getenv("VIDLINE_TEST_FAKE_COMFYUI_ROOT");
    if (port == nullptr || root == nullptr)
      return;
    {
      testing_support::comfyui_server s(root, std::atoi(port));
      s.exec_delay_s = 0.5;
      std::printf("fake comfyui on %s\n", port);
      std::fflush(stdout);
      for (;;)
        ::pause();
    }
  }
} fake_comfyui_main;

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

bool alive(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(st, s))
    return false;
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] != 'Z';
}

bool eventually(const std::function<bool()>& cond, double seconds = 15) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a condition
  }
  return cond();
}

/// A supervised bash program that is "up" once it has created <dir>/ready.
process::process_spec bash_spec(const temp_dir& dir, const std::string& script) {
  process::process_spec s;
  s.name = "test process";
  s.argv = {"/bin/bash", "-c", script};
  s.env = spawn::current_environment();
  s.cwd = dir.path();
  s.log_path = dir.path() + "/logs/process.log";
  std::string ready = dir.path() + "/ready";
  s.answers = [ready] { return std::filesystem::exists(ready); };
  s.start_timeout_s = 10;
  s.max_restarts = 2;
  s.restart_period_s = 30;
  s.stop_grace_s = 1;
  return s;
}

} // namespace

TEST_CASE("a backend process is started, restarted when it dies, stopped with its owner", "[process]") {
  temp_dir dir;
  pid_t first = 0, second = 0;
  {
    process::backend_process p(bash_spec(dir, "echo up; touch ready; exec sleep 300"));
    std::string why;
    REQUIRE(p.wait_ready(10, &why));
    first = p.pid();
    REQUIRE(first > 0);
    CHECK(alive(first));
    std::filesystem::remove(dir.path() + "/ready");  // "up" again only once the new one says so
    ::kill(first, SIGKILL);
    REQUIRE(eventually([&] { return p.restarts() == 1 && p.pid() != 0 && p.pid() != first; }));
    REQUIRE(p.wait_ready(10, &why));
    second = p.pid();
    CHECK(alive(second));
  }  // the owner goes: the process goes with it
  CHECK(eventually([&] { return !alive(second); }, 5));
  CHECK(testing_support::read_file(dir.path() + "/logs/process.log").find("up\nup\n") == 0);
}

TEST_CASE("a backend process in a crash loop is given up on past its budget", "[process]") {
  temp_dir dir;
  process::backend_process p(bash_spec(dir, "echo crashing >&2; exit 3"));
  std::string why;
  CHECK(!p.wait_ready(30, &why));
  CHECK(p.current() == process::backend_process::state::gave_up);
  CHECK(why.find("gave up after more than 2 restarts within 30 s (last: exit 3)") != std::string::npos);
  CHECK(testing_support::read_file(dir.path() + "/logs/process.log").find("crashing") != std::string::npos);
}

TEST_CASE("a process that never answers is stopped at its start timeout and retried", "[process]") {
  temp_dir dir;
  auto spec = bash_spec(dir, "exec sleep 300");
  spec.start_timeout_s = 0.3;
  spec.max_restarts = 0;
  process::backend_process p(spec);
  std::string why;
  CHECK(!p.wait_ready(10, &why));
  CHECK(why.find("did not answer within 0 s") != std::string::npos);
}

TEST_CASE("a ComfyUI instance gets its own port, directories, database and a short runtime dir", "[process]") {
  comfyui::process_options o;
  o.argv = {"/opt/comfy/venv/bin/python", "main.py", "--port", "{port}", "--listen", "{host}",
            "--input-directory", "{input_dir}", "--output-directory", "{output_dir}",
            "--temp-directory", "{temp_dir}", "--user-directory", "{user_dir}",
            "--database-url", "sqlite:///{database}"};
  o.env = {{"EXTRA", "{runtime_dir}/x"}};
  o.base_dir = "/var/lib/vidline/comfy/pool_four_a_with_a_rather_long_name_for_its_directory";
  auto e = comfyui::endpoint::parse("http://127.0.0.1:8190");
  auto s = process::comfyui_process_spec(o, e, "four_a", "nvidia", {"0", "1", "2", "3"});
  std::string args;
  for (auto& a : s.argv)
    args += a + " ";
  CHECK(args == "/opt/comfy/venv/bin/python main.py --port 8190 --listen 127.0.0.1 --input-directory " +
                  o.base_dir + "/input --output-directory " + o.base_dir + "/output --temp-directory " +
                  o.base_dir + "/tmp --user-directory " + o.base_dir + "/user --database-url sqlite:///" +
                  o.base_dir + "/comfyui.db ");
  auto runtime = process::default_runtime_dir(o.base_dir);
  CHECK(runtime.size() <= process::runtime_dir_max);
  CHECK(runtime.rfind("/tmp/vl-", 0) == 0);
  auto has = [&](const std::string& kv) { return std::find(s.env.begin(), s.env.end(), kv) != s.env.end(); };
  CHECK(has("CUDA_VISIBLE_DEVICES=0,1,2,3"));
  CHECK(has("RAY_TMPDIR=" + runtime));
  CHECK(has("RAYLIGHT_RAY_TMPDIR=" + runtime));
  CHECK(has("MASTER_PORT=18190"));
  CHECK(has("EXTRA=" + runtime + "/x"));
  CHECK(s.log_path == o.base_dir + "/comfyui.log");
  // Two instances: two runtime directories.
  CHECK(process::default_runtime_dir(o.base_dir + "2") != runtime);
  // A runtime directory Ray's sockets would not fit under is refused.
  o.runtime_dir = "/tmp/" + std::string(60, 'r');
  CHECK_THROWS_WITH(process::comfyui_process_spec(o, e, "four_a", "nvidia", {"0"}),
                    Catch::Contains("over the 107-byte limit of Unix socket paths"));
}

TEST_CASE("a comfyui pool owns its ComfyUI: started on demand, restarted after kill -9, stopped with it", "[process]") {
  temp_dir dir;
  int port = testing_support::free_ports(1)[0];
  std::string base = dir.path() + "/comfy";
  json options = {{"url", "http://127.0.0.1:" + std::to_string(port)},
                  {"sample_workflow", std::string(VIDLINE_SOURCE_DIR) + "/config/examples/comfyui_workflow_sample_av.json"},
                  {"latents", {{"video", "10"}, {"audio", "11"}}},
                  {"poll_interval_s", 0.05},
                  {"unreachable_s", 20},
                  {"outputs_from", "directory"},
                  {"output_dir", base + "/root/output"},
                  {"process", {{"argv", {self_exe()}},
                               {"env", {{"VIDLINE_TEST_FAKE_COMFYUI_PORT", "{port}"},
                                        {"VIDLINE_TEST_FAKE_COMFYUI_ROOT", "{base_dir}/root"}}},
                               {"base_dir", base},
                               {"start_timeout_s", 20},
                               {"max_restarts", 3}}}};
  config::backend b;
  b.name = "comfy";
  b.type = "comfyui";
  b.options = options;
  msg::job_spec job;
  job.run_id = "r";
  job.seed = 5;
  job.width = 64;
  job.height = 64;
  job.seconds = 1;
  job.prompt = "owned";
  job.prompt_sha256 = to_hex(sha256_of(job.prompt));
  auto env_of = [&](const std::string& attempt) {
    stage_env e;
    e.work_dir = dir.path() + "/data/work/" + attempt;
    std::filesystem::create_directories(e.work_dir);
    e.output_path = e.work_dir + "/latent";
    e.devices = {"0"};
    e.vendor = "nvidia";
    e.timeout_s = 60;
    return e;
  };
  pid_t comfy = 0;
  {
    auto sampler = make_sampler({b, "k", "pool_p"});
    auto r = sampler->sample(job, "", env_of("1"));
    INFO(r.error);
    REQUIRE(r.outcome == "ok");
    std::string log = testing_support::read_file(base + "/comfyui.log");
    CHECK(log.find("fake comfyui on " + std::to_string(port)) != std::string::npos);

    // kill -9 the instance while a prompt runs: it is restarted (history lost) and the
    // prompt submitted again.
    stage_result r2;
    std::thread t([&] { r2 = sampler->sample(job, "", env_of("2")); });
    auto log_has_two = [&] {
      auto l = testing_support::read_file(base + "/comfyui.log");
      return l.find("fake comfyui") != std::string::npos;
    };
    REQUIRE(eventually(log_has_two));
    // Find the instance by its port in /proc and kill it.
    auto find = [&]() -> pid_t {
      for (auto& e : std::filesystem::directory_iterator("/proc")) {
        std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
          continue;
        std::ifstream env(e.path() / "environ", std::ios::binary);
        std::string all((std::istreambuf_iterator<char>(env)), {});
        if (all.find("VIDLINE_TEST_FAKE_COMFYUI_PORT=" + std::to_string(port)) != std::string::npos &&
            alive(std::stoi(name)))
          return std::stoi(name);
      }
      return 0;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the prompt is running
    pid_t victim = find();
    REQUIRE(victim > 0);
    ::kill(victim, SIGKILL);
    t.join();
    INFO(r2.error);
    CHECK(r2.outcome == "ok");
    comfy = find();
    CHECK(comfy > 0);
    CHECK(comfy != victim);
  }  // the sampler goes: its ComfyUI is stopped
  CHECK(eventually([&] { return !alive(comfy); }, 15));
}
