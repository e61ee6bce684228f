// The exec backend with real child processes (tests/support/programs/*.sh): success,
// failure classes, out of memory, timeouts, cancellation, garbage, leftover children,
// and the sim contract's latent and video file made by a child process.

#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <pthread.h>

#include "common/spawn/child.hpp"
#include "backends/exec/exec_backend.hpp"
#include "backends/exec/exec_options.hpp"
#include "backends/exec/stage_util.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "tests/support/contract.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::backends;
using json = nlohmann::json;
using testing_support::read_file;
using testing_support::temp_dir;

namespace {

const std::string programs = std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/";
const std::string fake = programs + "fake_stage.sh";

config::backend exec_backend(json options) {
  config::backend b;
  b.name = "runner";
  b.type = "exec";
  b.options = std::move(options);
  return b;
}

/// A sampler whose sample stage runs fake_stage.sh MODE {output} ARGS...
std::unique_ptr<sampler_backend> fake_sampler(const std::string& mode, json extra = json::object(),
                                              std::vector<std::string> args = {}) {
  json argv = {fake, mode, "{output}"};
  for (auto& a : args)
    argv.push_back(a);
  json o = {{"sample", {{"argv", argv}}}, {"kill_grace_s", 0.3}};
  o.update(extra);
  return exec::make_exec_sampler({exec_backend(o), "t10x4", "pool_x"});
}

msg::job_spec job(uint64_t seed = 42, uint32_t w = 16, uint32_t h = 16, uint32_t s = 1) {
  msg::job_spec j;
  j.run_id = "run-1";
  j.index = 3;
  j.seed = seed;
  j.width = w;
  j.height = h;
  j.seconds = s;
  j.prompt = "a cat; rm -rf / $(reboot) `id` \"quoted\" 'single'\nsecond line";
  j.prompt_sha256 = to_hex(sha256_of(j.prompt));
  return j;
}

/// A stage env in <dir>/data/work/<attempt>, as the actors lay it out.
stage_env env_in(const temp_dir& dir, const std::string& attempt = "17") {
  stage_env e;
  e.work_dir = dir.path() + "/data/work/" + attempt;
  std::filesystem::create_directories(e.work_dir);
  e.output_path = e.work_dir + "/latent";
  e.devices = {"2", "3"};
  e.vendor = "nvidia";
  e.timeout_s = 30;
  return e;
}

std::string log_of(const temp_dir& dir, const std::string& stem, const char* which) {
  return dir.path() + "/data/logs/backends/pool_x/" + stem + "." + which + ".log";
}

bool process_alive(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(st, s))
    return false;
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] != 'Z';
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

TEST_CASE("exec options: errors name the field", "[exec]") {
  auto error_of = [](json o) -> std::string {
    try {
      exec::parse_exec_options("gpu", o);
    } catch (const config::config_error& e) {
      return e.what();
    }
    return "none";
  };
  CHECK(error_of(json()) .find("/backends/gpu/options") == 0);
  CHECK(error_of({{"sampel", {{"argv", {"x"}}}}}).find("/backends/gpu/options/sampel: unknown key") == 0);
  CHECK(error_of({{"sample", {{"argv", json::array()}}}}) == "/backends/gpu/options/sample/argv: must name a program (argv[0])");
  CHECK(error_of({{"sample", {{"argv", {"x", "{latent}"}}}}}).find("/backends/gpu/options/sample/argv/1: the sample stage has no placeholder {latent}") == 0);
  CHECK(error_of({{"decode", {{"argv", {"x", "{ouput}"}}}}}).find("(did you mean 'output'?)") != std::string::npos);
  CHECK(error_of({{"sample", {{"argv", {"x", "{output"}}}}}).find("/backends/gpu/options/sample/argv/1: '{' at offset 0 is not closed") == 0);
  CHECK(error_of({{"sample", {{"argv", {"{output}"}}}}}).find("must be written out") != std::string::npos);
  CHECK(error_of({{"sample", {{"argv", {"x"}}}}, {"other_exits", "maybe"}}).find("/backends/gpu/options/other_exits") == 0);
  CHECK(error_of({{"sample", {{"argv", {"x"}}}}, {"fatal_exit_codes", {75}}}).find("also in transient_exit_codes") != std::string::npos);
  CHECK(error_of({{"sample", {{"argv", {"x"}}, {"env", {{"A=B", "1"}}}}}}).find("/backends/gpu/options/sample/env/A=B") == 0);
  CHECK(error_of({{"sample", {{"argv", {"x", "{{literal}}", "{seed}"}}}}}) == "none");

  // A pool needs a sample stage; a decoder a decode stage.
  config::backend b = exec_backend({{"decode", {{"argv", {"x"}}}}});
  CHECK_THROWS_WITH(exec::make_exec_sampler({b, "k", "pool_a"}),
                    "/backends/runner/options: 'sample' is missing, and pool_a needs it");
  CHECK_NOTHROW(exec::make_exec_decoder({b, "k", "dec"}));
}

TEST_CASE("argv templates: placeholders become plain text, braces escape", "[exec]") {
  std::map<std::string, std::string> v{{"output", "/o ut"}, {"seed", "7"}, {"prompt_file", "p"}};
  CHECK(exec::expand("--out={output}", v) == "--out=/o ut");
  CHECK(exec::expand("{{seed}}={seed}", v) == "{seed}=7");
  CHECK(exec::expand("}}{{", v) == "}{");
  CHECK_THROWS_AS(exec::expand("{nope}", v), std::invalid_argument);
  CHECK_THROWS_AS(exec::expand("a}b", v), std::invalid_argument);
  CHECK_THROWS_AS(exec::expand("{Seed}", v), std::invalid_argument);
  CHECK(exec::placeholders_in("{a}{b_2}x") == std::vector<std::string>{"a", "b_2"});
}

TEST_CASE("exit classification: out of memory is capacity, exit codes by the options", "[exec]") {
  exec::exec_options o;
  spawn::child_end e;
  e.how = spawn::child_end::kind::exited;
  e.exit_code = 1;
  CHECK(std::string(exec::classify_exit(e, "Traceback\ntorch.OutOfMemoryError: CUDA out of memory.", o).outcome) == "capacity");
  CHECK(std::string(exec::classify_exit(e, "RuntimeError: HIP out of memory", o).outcome) == "capacity");
  CHECK(std::string(exec::classify_exit(e, "hipErrorOutOfMemory", o).outcome) == "capacity");
  CHECK(std::string(exec::classify_exit(e, "RuntimeError: NCCL timeout", o).outcome) == "transient");
  e.exit_code = 2;
  CHECK(std::string(exec::classify_exit(e, "", o).outcome) == "fatal");
  e.exit_code = 127;
  CHECK(std::string(exec::classify_exit(e, "", o).outcome) == "fatal");
  e.exit_code = 75;
  CHECK(std::string(exec::classify_exit(e, "", o).outcome) == "transient");
  e.exit_code = 3;
  o.other_exits = "fatal";
  CHECK(std::string(exec::classify_exit(e, "", o).outcome) == "fatal");
  o.capacity_patterns = {"not enough VRAM"};
  CHECK(std::string(exec::classify_exit(e, "...not enough VRAM...", o).outcome) == "capacity");
  e.how = spawn::child_end::kind::signaled;
  e.signal = SIGKILL;
  o.other_exits = "transient";
  auto v = exec::classify_exit(e, "", o);
  CHECK(std::string(v.outcome) == "transient");
  CHECK(v.reason.find("OOM killer") != std::string::npos);
}

TEST_CASE("devices reach the program by vendor", "[exec]") {
  using kv = std::vector<std::pair<std::string, std::string>>;
  CHECK(exec::device_variables("nvidia", {"4", "5"}) ==
        kv{{"CUDA_VISIBLE_DEVICES", "4,5"}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}});
  CHECK(exec::device_variables("amd", {"1"}) ==
        kv{{"ROCR_VISIBLE_DEVICES", "1"}, {"HIP_VISIBLE_DEVICES", "0"}});
  CHECK(exec::device_variables("cpu", {"0"}).empty());
  CHECK(exec::device_variables("nvidia", {}).empty());
}

TEST_CASE("printable keeps UTF-8, drops control bytes and invalid sequences", "[exec]") {
  CHECK(exec::printable("ok\nnext\n") == "ok | next");
  CHECK(exec::printable("caf\xc3\xa9 \xe2\x9c\x93") == "caf\xc3\xa9 \xe2\x9c\x93");
  CHECK(exec::printable(std::string("a\x00\x01\xff\xc3", 5)) == "a????");
  CHECK(exec::printable("\xed\xa0\x80") == "???");  // a surrogate is not UTF-8
  CHECK(exec::printable(std::string(1000, 'x'), 10) == "xxxxxxxxxx...");
}

TEST_CASE("a succeeding command: product moved, digest recorded, env, cwd, logs", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  auto s = fake_sampler("ok", {{"env", {{"EXTRA", "seed={seed}"}}}}, {"{prompt_file}", "{seed}"});
  auto r = s->sample(job(), "", env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(read_file(env.output_path) == "product of sample\n");
  CHECK(r.sha256 == to_hex(sha256_of(std::string("product of sample\n"))));
  CHECK(r.bytes == 18);
  CHECK(r.elapsed_s > 0);
  auto out = read_file(log_of(dir, "run-1-3-sample-17", "stdout"));
  CHECK(out.find("argv: " + env.work_dir + "/prompt.txt 42") != std::string::npos);
  CHECK(out.find("pwd: " + env.work_dir) != std::string::npos);
  CHECK(out.find("CUDA_VISIBLE_DEVICES=2,3") != std::string::npos);
  CHECK(out.find("CUDA_DEVICE_ORDER=PCI_BUS_ID") != std::string::npos);
  CHECK(out.find("HIP_VISIBLE_DEVICES=<unset>") != std::string::npos);
  CHECK(out.find("VIDLINE_OWNER=pool_x") != std::string::npos);
  CHECK(out.find("EXTRA=seed=42") != std::string::npos);
  CHECK(read_file(env.work_dir + "/prompt.txt") == job().prompt);

  env.vendor = "amd";
  env.devices = {"1"};
  r = s->sample(job(), "", env);
  REQUIRE(r.outcome == "ok");
  out = read_file(log_of(dir, "run-1-3-sample-17", "stdout"));
  CHECK(out.find("ROCR_VISIBLE_DEVICES=1") != std::string::npos);
  CHECK(out.find("HIP_VISIBLE_DEVICES=0") != std::string::npos);
  CHECK(out.find("CUDA_VISIBLE_DEVICES=<unset>") != std::string::npos);
}

TEST_CASE("the prompt travels in a file, byte for byte, never on the command line", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  auto r = fake_sampler("copy_prompt", json::object(), {"{prompt_file}"})->sample(job(), "", env);
  REQUIRE(r.outcome == "ok");
  CHECK(read_file(env.output_path) == job().prompt);
}

TEST_CASE("failures are classified", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  struct row { const char* mode; const char* outcome; const char* says; };
  for (auto [mode, outcome, says] : {row{"fail", "transient", "exit 1: RuntimeError: something broke"},
                                     row{"usage", "fatal", "exit 2 (a fatal exit code)"},
                                     row{"tempfail", "transient", "exit 75 (a transient exit code)"},
                                     row{"segv", "transient", "killed by signal 11"},
                                     row{"oom", "capacity", "out of memory ('OutOfMemoryError')"},
                                     row{"oom_hip", "capacity", "out of memory"},
                                     row{"no_output", "fatal", "exited 0 but no output at"},
                                     row{"empty_output", "fatal", "is empty"}}) {
    INFO(mode);
    auto r = fake_sampler(mode)->sample(job(), "", env);
    CHECK(r.outcome == outcome);
    CHECK(r.error.find(says) != std::string::npos);
    CHECK(r.error.find("log " + log_of(dir, "run-1-3-sample-17", "stderr")) != std::string::npos);
    CHECK(!std::filesystem::exists(env.output_path));
  }
}

TEST_CASE("a program that does not exist is fatal", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  json o = {{"sample", {{"argv", {"/nonexistent/sampler", "{output}"}}}}};
  auto r = exec::make_exec_sampler({exec_backend(o), "k", "pool_x"})->sample(job(), "", env);
  CHECK(r.outcome == "fatal");
  CHECK(r.error.find("cannot start /nonexistent/sampler") != std::string::npos);
}

TEST_CASE("garbage on stdout/stderr: the error stays printable UTF-8", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  auto r = fake_sampler("garbage")->sample(job(), "", env);
  CHECK(r.outcome == "transient");
  CHECK(r.error.size() < 1200);
  // It must survive the status JSON (nlohmann throws on invalid UTF-8).
  CHECK_NOTHROW(json{{"error", r.error}}.dump());
  for (unsigned char c : r.error)
    CHECK((c >= 0x20 || c == '\t'));
}

TEST_CASE("a hanging command is stopped at the stage timeout, its whole group", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  env.timeout_s = 0.5;
  for (const char* mode : {"hang", "hang_hard"}) {
    INFO(mode);
    auto t0 = std::chrono::steady_clock::now();
    auto r = fake_sampler(mode)->sample(job(), "", env);
    double took = seconds_since(t0);
    CHECK(r.outcome == "transient");
    CHECK(r.error.find("timeout: exec sample (pool_x) exceeded the stage timeout of 0.5 s") == 0);
    CHECK(took >= 0.5);
    CHECK(took < 0.5 + 0.3 + 2.0);  // timeout + grace + slack
  }
  // Out of memory, then waiting forever (the other ranks): capacity, not a timeout.
  auto r = fake_sampler("oom_hang")->sample(job(), "", env);
  CHECK(r.outcome == "capacity");
  CHECK(r.error.find("then stopped at the stage timeout") != std::string::npos);
  // A per-stage timeout below the knob wins.
  env.timeout_s = 60;
  auto t0 = std::chrono::steady_clock::now();
  json o = {{"sample", {{"argv", {fake, "hang", "{output}"}}, {"timeout_s", 0.3}}}, {"kill_grace_s", 0.2}};
  r = exec::make_exec_sampler({exec_backend(o), "k", "pool_x"})->sample(job(), "", env);
  CHECK(r.outcome == "transient");
  CHECK(seconds_since(t0) < 3);
}

TEST_CASE("cancel stops the command promptly and kills its children", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  std::atomic<bool> cancel{false};
  env.cancel = &cancel;
  // A program that starts a child and waits: both must be gone after the cancel.
  json o = {{"sample", {{"argv", {"/bin/bash", "-c", "sleep 300 & echo $! > child.pid; wait", "x"}}}},
            {"kill_grace_s", 0.3}};
  auto sampler = exec::make_exec_sampler({exec_backend(o), "k", "pool_x"});
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  auto r = sampler->sample(job(), "", env);
  canceller.join();
  CHECK(r.outcome == "transient");
  CHECK(r.error == "cancelled");
  CHECK(seconds_since(t0) < 2.0);
  pid_t child = std::stoi(read_file(env.work_dir + "/child.pid"));
  for (int i = 0; i < 100 && process_alive(child); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(!process_alive(child));
}

TEST_CASE("children left behind by a finished command are killed", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  auto r = fake_sampler("leave_child")->sample(job(), "", env);
  REQUIRE(r.outcome == "ok");
  pid_t child = std::stoi(read_file(env.work_dir + "/child.pid"));
  for (int i = 0; i < 100 && process_alive(child); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(!process_alive(child));
}

TEST_CASE("a caller that blocks SIGTERM (the node does) still stops its child with SIGTERM", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir);
  env.timeout_s = 0.4;
  stage_result r;
  std::thread t([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    r = fake_sampler("term_trap", {{"kill_grace_s", 5}})->sample(job(), "", env);
  });
  auto t0 = std::chrono::steady_clock::now();
  t.join();
  std::signal(SIGPIPE, SIG_DFL);
  CHECK(r.outcome == "transient");
  CHECK(seconds_since(t0) < 3);  // not the 5 s grace: SIGTERM reached it
  CHECK(read_file(log_of(dir, "run-1-3-sample-17", "stderr")).find("got-term") != std::string::npos);
}

TEST_CASE("the sim contract through real child processes: latent, then video file", "[exec]") {
  temp_dir dir;
  json o = {{"encode", {{"argv", {programs + "sim_conditioning.sh", "{prompt_file}", "{output}"}}}},
            {"sample", {{"argv", {programs + "sim_latent.sh", "{seed}", "{width}", "{height}",
                                  "{seconds}", "{output}", "{conditioning}", "{prompt_file}"}}}},
            {"decode", {{"argv", {programs + "sim_video.sh", "{latent}", "{latent_sha256}",
                                  "{seed}", "{width}", "{height}", "{seconds}", "{output}"}}}}};
  auto b = exec_backend(o);
  auto j = job(987654321123ull, 24, 16, 2);

  auto cenv = env_in(dir, "encode-1");
  cenv.output_path = dir.path() + "/data/conditioning/x.cond";
  auto c = exec::make_exec_encoder({b, "k", "encoder_a"})->encode(j.prompt, cenv);
  REQUIRE(c.outcome == "ok");

  auto senv = env_in(dir, "21");
  auto s = exec::make_exec_sampler({b, "k", "pool_x"})->sample(j, cenv.output_path, senv);
  INFO(s.error);
  REQUIRE(s.outcome == "ok");
  auto bytes = contract::reference_latent_bytes(24, 16, 2);
  CHECK(s.bytes == bytes);
  CHECK(s.sha256 == contract::latent_sha256_v1(j.seed, 24, 16, 2, bytes));

  // Conditioning of another prompt: the program refuses (exit 65 -> transient by default).
  auto other = j;
  other.prompt = "another prompt";
  auto bad = exec::make_exec_sampler({b, "k", "pool_x"})->sample(other, cenv.output_path, env_in(dir, "22"));
  CHECK(bad.outcome == "transient");
  CHECK(bad.error.find("is for prompt") != std::string::npos);

  auto denv = env_in(dir, "23");
  denv.output_path = dir.path() + "/data/outputs/run-1/job-3.mp4";
  auto dec = exec::make_exec_decoder({b, "k", "decoder_b"});
  auto d = dec->decode(j, senv.output_path, s.sha256, denv);
  INFO(d.error);
  REQUIRE(d.outcome == "ok");
  CHECK(read_file(denv.output_path) == contract::video_file(s.sha256, j.seed, 24, 16, 2));

  // A latent that does not hash as expected is never decoded.
  auto wrong = std::string(64, 'a');
  auto denv2 = env_in(dir, "24");
  denv2.output_path = dir.path() + "/data/outputs/run-1/job-4.mp4";
  auto w = dec->decode(j, senv.output_path, wrong, denv2);
  CHECK(w.outcome == "corrupt");
  CHECK(!std::filesystem::exists(denv2.output_path));
  CHECK(!std::filesystem::exists(dir.path() + "/data/logs/backends/decoder_b/run-1-3-decode-24.stderr.log"));
}

TEST_CASE("an encoder without an encode command hands the prompt on", "[exec]") {
  temp_dir dir;
  auto env = env_in(dir, "e");
  env.output_path = dir.path() + "/cond";
  auto e = exec::make_exec_encoder({exec_backend({{"sample", {{"argv", {"x"}}}}}), "k", "enc"});
  auto r = e->encode("the prompt", env);
  REQUIRE(r.outcome == "ok");
  CHECK(read_file(env.output_path) == "the prompt");
  CHECK(r.sha256 == to_hex(sha256_of(std::string("the prompt"))));
}
