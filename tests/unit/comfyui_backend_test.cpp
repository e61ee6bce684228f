// The comfyui backend against the in-process test server (tests/support/comfyui_server.hpp):
// sampling to a latent bundle and decoding it, finding an earlier submission instead of
// running it twice, errors mapped to outcome classes, a restart that loses history, a
// slow server, an unreachable one, cancel and timeout with /interrupt, directory mode;
// node_errors in a 200 answer; the test server's answers against ComfyUI 0.3.64's.

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <thread>

#include "backends/comfyui/bundle.hpp"
#include "backends/comfyui/client.hpp"
#include "backends/comfyui/comfyui_backend.hpp"
#include "backends/comfyui/template.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "tests/support/comfyui_server.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::backends;
using json = nlohmann::json;
using testing_support::comfyui_server;
using testing_support::read_file;
using testing_support::temp_dir;

namespace {

const std::string examples = std::string(VIDLINE_SOURCE_DIR) + "/config/examples/";

json options_for(const comfyui_server& s) {
  return {{"url", s.url()},
          {"sample_workflow", examples + "comfyui_workflow_sample_av.json"},
          {"latents", {{"video", "10"}, {"audio", "11"}}},
          {"decode_workflow", examples + "comfyui_workflow_decode_av.json"},
          {"video_output", "8"},
          {"poll_interval_s", 0.02},
          {"unreachable_s", 3},
          {"request_timeout_s", 5}};
}

backend_params params(json options, const std::string& owner = "pool_c") {
  config::backend b;
  b.name = "comfy";
  b.type = "comfyui";
  b.options = std::move(options);
  return {b, "k", owner};
}

msg::job_spec job(uint32_t index = 0) {
  msg::job_spec j;
  j.run_id = "20250101-000000-abcd";
  j.index = index;
  j.seed = 987654321123ull + index;
  j.width = 416;
  j.height = 736;
  j.seconds = 5;
  j.prompt = "a \"quoted\" prompt, {{seed}}, \\ and a\nnewline";
  j.prompt_sha256 = to_hex(sha256_of(j.prompt));
  return j;
}

stage_env env_in(const temp_dir& dir, const std::string& attempt, const std::string& product = "latent") {
  stage_env e;
  e.work_dir = dir.path() + "/data/work/" + attempt;
  std::filesystem::create_directories(e.work_dir);
  e.output_path = product == "latent" ? e.work_dir + "/latent"
                                      : dir.path() + "/data/outputs/" + attempt + ".mp4";
  e.devices = {"0"};
  e.vendor = "nvidia";
  e.timeout_s = 30;
  return e;
}

bool wait_for(const std::function<bool()>& cond, double seconds = 10) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a condition
  }
  return cond();
}

std::string sample_id(const stage_env& env, const msg::job_spec& j = job()) {
  return comfyui::prompt_id_for("comfy", "pool_c", "sample", j, env.work_dir, "");
}

} // namespace

TEST_CASE("comfyui: sample to a latent bundle, decode it to a video file", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  auto sampler = make_sampler(params(options_for(server)));
  auto senv = env_in(dir, "11");
  auto r = sampler->sample(job(), "", senv);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  CHECK(r.bytes > 0);
  CHECK(r.sha256 == sha256_file_hex(senv.output_path));
  auto id = sample_id(senv);
  CHECK(comfyui::is_canonical_uuid(id));
  CHECK(server.executions(id) == 1);
  CHECK(server.origin_refusals() == 0);
  // The workflow as ComfyUI got it: typed numbers, the prompt byte for byte.
  json w = server.workflow_of(id);
  CHECK(w["8"]["inputs"]["seed"] == 987654321123ull);
  CHECK(w["5"]["inputs"]["width"] == 416);
  CHECK(w["5"]["inputs"]["length"] == 5 * 24 + 1);
  CHECK(w["2"]["inputs"]["text"] == job().prompt);
  CHECK(w["10"]["inputs"]["filename_prefix"] == "vidline/" + id + "/latent_video");

  // The bundle holds the two SaveLatent files.
  std::filesystem::create_directories(dir.path() + "/unpacked");
  auto parts = comfyui::read_bundle(senv.output_path, dir.path() + "/unpacked");
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].part == "audio");
  CHECK(parts[1].part == "video");
  CHECK(read_file(parts[1].path).rfind("FAKE-LATENT\n", 0) == 0);

  auto decoder = make_decoder(params(options_for(server), "decoder_d"));
  auto denv = env_in(dir, "12", "video");
  auto d = decoder->decode(job(), senv.output_path, r.sha256, denv);
  INFO(d.error);
  REQUIRE(d.outcome == "ok");
  CHECK(d.sha256 == sha256_file_hex(denv.output_path));
  // The video "decodes" both latents as they were placed (uploaded) on the server.
  json video = json::parse(read_file(denv.output_path));
  std::string dump = video.dump();
  CHECK(dump.find(sha256_file_hex(parts[0].path)) != std::string::npos);
  CHECK(dump.find(sha256_file_hex(parts[1].path)) != std::string::npos);
  auto did = comfyui::prompt_id_for("comfy", "decoder_d", "decode", job(), denv.work_dir, r.sha256);
  CHECK(std::filesystem::exists(server.root() + "/input/vidline/" + did + "/video.latent"));

  // A latent that does not hash as expected is never decoded.
  int before = server.submissions();
  auto bad = decoder->decode(job(), senv.output_path, std::string(64, '0'), env_in(dir, "13", "video"));
  CHECK(bad.outcome == "corrupt");
  CHECK(server.submissions() == before);
}

TEST_CASE("comfyui: the same attempt finds its earlier prompt instead of running it again", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  auto sampler = make_sampler(params(options_for(server)));
  auto env = env_in(dir, "21");
  REQUIRE(sampler->sample(job(), "", env).outcome == "ok");
  // The node died after the prompt ended; the resent order runs the same attempt again.
  auto again = make_sampler(params(options_for(server)))->sample(job(), "", env);
  REQUIRE(again.outcome == "ok");
  CHECK(server.executions(sample_id(env)) == 1);
  CHECK(server.submissions() == 1);

  // An earlier process submitted it and died while it was queued: wait for that one.
  auto env2 = env_in(dir, "22");
  auto id2 = sample_id(env2);
  server.hold = true;
  comfyui::client direct(comfyui::endpoint::parse(server.url()));
  comfyui::template_values v = {{"prompt", job().prompt}, {"negative_prompt", ""}, {"seed", job().seed},
                       {"width", 416}, {"height", 736}, {"seconds", 5}, {"frames", 121}, {"fps", 24},
                       {"run_id", job().run_id}, {"index", 0}, {"job", "x"},
                       {"latent_prefix", "vidline/" + id2 + "/latent"}};
  auto wf = comfyui::render(json::parse(read_file(examples + "comfyui_workflow_sample_av.json")), v);
  REQUIRE(wf.ok);
  direct.submit(wf.workflow, id2, "someone-earlier");
  REQUIRE(wait_for([&] { return server.running(id2); }));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server.hold = false;
  });
  auto r = sampler->sample(job(), "", env2);
  release.join();
  INFO(r.error);
  CHECK(r.outcome == "ok");
  CHECK(server.executions(id2) == 1);
  CHECK(server.submissions() == 2);
}

TEST_CASE("comfyui: errors map to the outcome classes", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  int attempt = 30;
  auto run = [&](json options) {
    return make_sampler(params(options))->sample(job(), "", env_in(dir, std::to_string(attempt++)));
  };
  SECTION("400 with node_errors: fatal, naming the node and input") {
    json o = options_for(server);
    json w = json::parse(read_file(examples + "comfyui_workflow_sample_av.json"));
    w["8"]["inputs"]["seed"] = "seed-{{seed}}";  // a string where ComfyUI wants an INT
    o["sample_workflow"] = w;
    auto r = run(o);
    CHECK(r.outcome == "fatal");
    CHECK(r.error.find("refused the workflow (HTTP 400): prompt_outputs_failed_validation") != std::string::npos);
    CHECK(r.error.find("node 8 (KSampler)") != std::string::npos);
    CHECK(r.error.find("seed") != std::string::npos);
  }
  SECTION("a node class the server lacks: fatal") {
    json o = options_for(server);
    json w = json::parse(read_file(examples + "comfyui_workflow_sample_av.json"));
    w["9"]["class_type"] = "RaylightSeparateAV";
    o["sample_workflow"] = w;
    auto r = run(o);
    CHECK(r.outcome == "fatal");
    CHECK(r.error.find("invalid_prompt: Cannot execute because node RaylightSeparateAV does not exist. (Node ID '#9')") !=
          std::string::npos);
  }
  SECTION("out of memory: capacity") {
    server.fail_with = [](const std::string&, const json&) -> std::optional<json> {
      return json{{"exception_type", "torch.OutOfMemoryError"},
                  {"exception_message", "CUDA out of memory. Tried to allocate 1.06 GiB."},
                  {"traceback", {"  File \"nodes.py\", line 1", "torch.OutOfMemoryError"}}};
    };
    auto r = run(options_for(server));
    CHECK(r.outcome == "capacity");
    CHECK(r.error.find("CUDA out of memory") != std::string::npos);
  }
  SECTION("a Ray worker died: transient; fatal_patterns: fatal; others: other_errors") {
    server.fail_with = [](const std::string&, const json&) -> std::optional<json> {
      return json{{"exception_type", "ray.exceptions.RayActorError"}, {"exception_message", "The actor died"}};
    };
    CHECK(run(options_for(server)).outcome == "transient");
    server.fail_with = [](const std::string&, const json&) -> std::optional<json> {
      return json{{"exception_type", "FileNotFoundError"}, {"exception_message", "no such model"}};
    };
    CHECK(run(options_for(server)).outcome == "transient");
    json o = options_for(server);
    o["fatal_patterns"] = {"FileNotFoundError"};
    CHECK(run(o).outcome == "fatal");
    o = options_for(server);
    o["other_errors"] = "fatal";
    CHECK(run(o).outcome == "fatal");
  }
  SECTION("a workflow that needs a reference image the job lacks: fatal, nothing submitted") {
    json o = options_for(server);
    json w = json::parse(read_file(examples + "comfyui_workflow_sample_av.json"));
    w["20"] = {{"class_type", "LoadImage"}, {"inputs", {{"image", "{{reference_image}}"}}}};
    o["sample_workflow"] = w;
    auto r = run(o);
    CHECK(r.outcome == "fatal");
    CHECK(r.error.find("--reference-file") != std::string::npos);
    CHECK(server.submissions() == 0);
  }
}

TEST_CASE("comfyui: node_errors in a 200 answer refuse the workflow and stop what was queued", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  SECTION("a sample workflow whose audio latent's output fails validation") {
    // ComfyUI 0.3.64 queues the valid output (the video latent) and answers 200; the job
    // used to fail later with "saved no file", the server's reason lost.
    // Another prompt runs, so ours waits in the queue where the backend finds it.
    server.hold = true;
    comfyui::client direct(comfyui::endpoint::parse(server.url()));
    comfyui::template_values v = {{"prompt", "p"}, {"negative_prompt", ""}, {"seed", 1}, {"width", 416},
                                  {"height", 736}, {"seconds", 5}, {"frames", 121}, {"fps", 24},
                                  {"run_id", "r"}, {"index", 0}, {"job", "x"}, {"latent_prefix", "blocker/latent"}};
    auto blocker = comfyui::render(json::parse(read_file(examples + "comfyui_workflow_sample_av.json")), v);
    REQUIRE(blocker.ok);
    direct.submit(blocker.workflow, "blocker", "test");
    REQUIRE(wait_for([&] { return server.running("blocker"); }));

    json o = options_for(server);
    json w = json::parse(read_file(examples + "comfyui_workflow_sample_av.json"));
    w["11"]["inputs"].erase("filename_prefix");
    o["sample_workflow"] = w;
    auto env = env_in(dir, "35");
    auto r = make_sampler(params(o))->sample(job(), "", env);
    INFO(r.error);
    CHECK(r.outcome == "fatal");
    CHECK(r.error.find("refused part of the workflow (HTTP 200 with node_errors") != std::string::npos);
    CHECK(r.error.find("node 11 (SaveLatent): Required input is missing filename_prefix") != std::string::npos);
    CHECK(r.error.find("saved no file") == std::string::npos);
    // What ComfyUI queued of it was dropped, not left to run.
    auto id = sample_id(env);
    CHECK(r.error.find("prompt " + id + " removed from the queue") != std::string::npos);
    CHECK(!direct.queue().holds(id));
    server.hold = false;
    REQUIRE(wait_for([&] { return direct.history("blocker").has_value(); }));
    CHECK(server.executions(id) == 0);
  }
  SECTION("a decode workflow with an invalid extra branch no longer succeeds") {
    auto sampler = make_sampler(params(options_for(server)));
    auto senv = env_in(dir, "36");
    auto s = sampler->sample(job(), "", senv);
    REQUIRE(s.outcome == "ok");
    json o = options_for(server);
    json w = json::parse(read_file(examples + "comfyui_workflow_decode_av.json"));
    w["9"] = {{"class_type", "SaveVideo"},
              {"inputs", {{"video", {"7", 0}}, {"filename_prefix", "preview"}, {"format", "mp4"}, {"codec", json::array({"7"})}}}};
    o["decode_workflow"] = w;
    auto denv = env_in(dir, "37", "video");
    auto d = make_decoder(params(o, "decoder_d"))->decode(job(), senv.output_path, s.sha256, denv);
    INFO(d.error);
    CHECK(d.outcome == "fatal");
    CHECK(d.error.find("node 9 (SaveVideo): Bad linked input, must be a length-2 list of [node_id, slot_index] codec") !=
          std::string::npos);
    CHECK(!std::filesystem::exists(denv.output_path));
  }
}

TEST_CASE("comfyui: the test server answers as ComfyUI 0.3.64 does", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  server.exec_delay_s = 0;
  httplib::Client c("127.0.0.1", server.port());
  json sample = json::parse(read_file(examples + "comfyui_workflow_sample_av.json"));
  comfyui::template_values v = {{"prompt", "p"}, {"negative_prompt", ""}, {"seed", 1}, {"width", 416},
                                {"height", 736}, {"seconds", 5}, {"frames", 121}, {"fps", 24},
                                {"run_id", "r"}, {"index", 0}, {"job", "x"}, {"latent_prefix", "t/latent"}};
  json wf = comfyui::render(sample, v).workflow;
  auto post = [&](const json& body) {
    auto r = c.Post("/prompt", body.dump(), "application/json");
    REQUIRE(r);
    return std::make_pair(r->status, json::parse(r->body, nullptr, false));
  };

  // number counts from 0; any prompt_id is taken; none gets a UUID.
  auto [s0, a0] = post({{"prompt", wf}, {"prompt_id", "job-1"}});
  CHECK(s0 == 200);
  CHECK(a0["prompt_id"] == "job-1");
  CHECK(a0["number"] == 0);
  CHECK(a0["node_errors"] == json::object());

  // A class the server lacks: invalid_prompt naming the node; the number is spent.
  json unknown = wf;
  unknown["9"]["class_type"] = "NoSuchNode";
  auto [s1, a1] = post({{"prompt", unknown}, {"prompt_id", "job-2"}});
  CHECK(s1 == 400);
  CHECK(a1["error"]["type"] == "invalid_prompt");
  CHECK(a1["error"]["message"] == "Cannot execute because node NoSuchNode does not exist.");
  CHECK(a1["error"]["details"] == "Node ID '#9'");
  CHECK(a1["node_errors"] == json::object());

  // An empty graph has no outputs.
  auto [s2, a2] = post({{"prompt", json::object()}});
  CHECK(s2 == 400);
  CHECK(a2["error"]["type"] == "prompt_no_outputs");

  auto [s3, a3] = post({{"prompt", wf}});
  CHECK(s3 == 200);
  CHECK(a3["number"] == 3);
  CHECK(comfyui::is_canonical_uuid(a3["prompt_id"].get<std::string>()));

  // Some outputs invalid: 200, node_errors with the outputs they cost; the rest runs.
  json part = wf;
  part["11"]["inputs"]["filename_prefix"] = {"1", 0, 2};
  auto [s4, a4] = post({{"prompt", part}, {"prompt_id", "job-4"}});
  CHECK(s4 == 200);
  CHECK(a4["node_errors"]["11"]["class_type"] == "SaveLatent");
  CHECK(a4["node_errors"]["11"]["errors"][0]["type"] == "bad_linked_input");
  CHECK(a4["node_errors"]["11"]["dependent_outputs"] == json::array({"11"}));
  comfyui::client ours(comfyui::endpoint::parse(server.url()));
  REQUIRE(wait_for([&] { return ours.history("job-4").has_value(); }));
  json outputs = (*ours.history("job-4"))["outputs"];
  CHECK(outputs.contains("10"));
  CHECK(!outputs.contains("11"));

  // All outputs invalid: 400, the reasons in details. INT inputs convert as Python's int().
  json bad = wf;
  bad["8"]["inputs"]["seed"] = "seed-1";
  auto [s5, a5] = post({{"prompt", bad}});
  CHECK(s5 == 400);
  CHECK(a5["error"]["type"] == "prompt_outputs_failed_validation");
  CHECK(a5["node_errors"]["8"]["errors"][0]["type"] == "invalid_input_type");
  CHECK(a5["node_errors"]["8"]["dependent_outputs"].size() == 2);
  bad["8"]["inputs"]["seed"] = " 17 ";
  auto [s6, a6] = post({{"prompt", bad}, {"prompt_id", "job-6"}});
  CHECK(s6 == 200);
  CHECK(server.workflow_of("job-6")["8"]["inputs"]["seed"] == 17);

  // Only an Origin naming another host is refused, with 403.
  std::string self = "http://127.0.0.1:" + std::to_string(server.port());
  auto same = c.Get("/queue", httplib::Headers{{"Origin", self}});
  REQUIRE(same);
  CHECK(same->status == 200);
  auto foreign = c.Get("/queue", httplib::Headers{{"Origin", "http://evil.example"}});
  REQUIRE(foreign);
  CHECK(foreign->status == 403);
  CHECK(server.origin_refusals() == 1);

  // /view: ".." in the name is 400, a subfolder outside the directory 403, no file 404.
  std::filesystem::create_directories(server.root() + "/output/sub");
  std::ofstream(server.root() + "/output/sub/f.bin") << "x";
  auto view = [&](const std::string& query) {
    auto r = c.Get("/view?" + query);
    REQUIRE(r);
    return r->status;
  };
  CHECK(view("filename=f.bin&subfolder=sub") == 200);
  CHECK(view("filename=f.bin&subfolder=sub/../sub") == 200);
  CHECK(view("filename=..%2Ff.bin&subfolder=sub") == 400);
  CHECK(view("filename=f.bin&subfolder=../input") == 403);
  CHECK(view("filename=f.bin&subfolder=%2Fetc") == 403);
  CHECK(view("filename=g.bin&subfolder=sub") == 404);

  // Under --cpu the device has no index.
  CHECK(ours.system_stats()["devices"][0]["index"] == 0);
  server.cpu_only = true;
  json stats = ours.system_stats();
  CHECK(stats["devices"][0]["type"] == "cpu");
  CHECK(stats["devices"][0]["index"].is_null());
}

TEST_CASE("comfyui: a reference image is uploaded and named to the workflow", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  json o = options_for(server);
  json w = json::parse(read_file(examples + "comfyui_workflow_sample_av.json"));
  w["20"] = {{"class_type", "LoadImage"}, {"inputs", {{"image", "{{reference_image}}"}}}};
  o["sample_workflow"] = w;
  auto j = job();
  j.reference = dir.path() + "/ref.png";
  std::ofstream(j.reference) << "PNG bytes";
  auto env = env_in(dir, "40");
  auto r = make_sampler(params(o))->sample(j, "", env);
  INFO(r.error);
  REQUIRE(r.outcome == "ok");
  auto id = sample_id(env, j);
  CHECK(server.workflow_of(id)["20"]["inputs"]["image"] == "vidline/" + id + "/reference.png");
  CHECK(read_file(server.root() + "/input/vidline/" + id + "/reference.png") == "PNG bytes");
}

TEST_CASE("comfyui: a restart that loses the queue and history: the prompt is submitted again", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  auto sampler = make_sampler(params(options_for(server)));
  auto env = env_in(dir, "50");
  auto id = sample_id(env);
  server.hold = true;
  stage_result r;
  std::thread t([&] { r = sampler->sample(job(), "", env); });
  REQUIRE(wait_for([&] { return server.running(id); }));
  server.restart(0.3);
  server.hold = false;
  t.join();
  INFO(r.error);
  CHECK(r.outcome == "ok");
  CHECK(server.executions(id) == 2);   // the lost run, then the one that counted
  CHECK(server.submissions() == 2);

  // With no resubmissions allowed, the loss ends the attempt (transient: retried elsewhere).
  json o = options_for(server);
  o["resubmit_limit"] = 0;
  auto env2 = env_in(dir, "51");
  auto id2 = sample_id(env2);
  server.hold = true;
  std::thread t2([&] { r = make_sampler(params(o))->sample(job(), "", env2); });
  REQUIRE(wait_for([&] { return server.running(id2); }));
  server.restart(0.1);
  server.hold = false;
  t2.join();
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("lost prompt " + id2) != std::string::npos);
}

TEST_CASE("comfyui: a slow server is waited for, a silent one ends the attempt", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  server.response_delay_s = 0.15;
  auto r = make_sampler(params(options_for(server)))->sample(job(), "", env_in(dir, "60"));
  INFO(r.error);
  CHECK(r.outcome == "ok");

  // Answers slower than the request timeout, for longer than unreachable_s: transient.
  server.response_delay_s = 1.0;
  json o = options_for(server);
  o["request_timeout_s"] = 0.2;
  o["unreachable_s"] = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  r = make_sampler(params(o))->sample(job(), "", env_in(dir, "61"));
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("no answer for") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  server.response_delay_s = 0;

  // Nothing listening at all.
  o = options_for(server);
  o["url"] = "http://127.0.0.1:" + std::to_string(testing_support::free_ports(1)[0]);
  o["unreachable_s"] = 0.3;
  r = make_sampler(params(o))->sample(job(), "", env_in(dir, "62"));
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("Connection") != std::string::npos);
}

TEST_CASE("comfyui: cancel and timeout interrupt the running prompt or drop the queued one", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  server.hold = true;
  auto sampler = make_sampler(params(options_for(server)));

  auto env = env_in(dir, "70");
  std::atomic<bool> cancel{false};
  env.cancel = &cancel;
  stage_result r;
  std::thread t([&] { r = sampler->sample(job(), "", env); });
  REQUIRE(wait_for([&] { return server.running(sample_id(env)); }));
  cancel = true;
  t.join();
  CHECK(r.outcome == "transient");
  CHECK(r.error == "cancelled");
  CHECK(server.interrupts() == 1);
  CHECK(wait_for([&] { return !server.running(sample_id(env)); }));

  // The stage timeout: the same, with the reason.
  auto env2 = env_in(dir, "71");
  env2.timeout_s = 0.4;
  r = sampler->sample(job(), "", env2);
  CHECK(r.outcome == "transient");
  CHECK(r.error.find("timeout: comfyui sample (pool_c) exceeded the stage timeout of 0.4 s; prompt " +
                     sample_id(env2) + " interrupted") == 0);

  // Queued behind another prompt when cancelled: removed from the queue, nothing interrupted.
  auto env3 = env_in(dir, "72");
  std::atomic<bool> cancel3{false};
  env3.cancel = &cancel3;
  std::thread blocker([&] { make_sampler(params(options_for(server)))->sample(job(1), "", env_in(dir, "73")); });
  REQUIRE(wait_for([&] { return server.running(sample_id(env_in(dir, "73"), job(1))); }));
  int interrupts = server.interrupts();
  std::thread t3([&] { r = sampler->sample(job(), "", env3); });
  comfyui::client direct(comfyui::endpoint::parse(server.url()));
  REQUIRE(wait_for([&] { return direct.queue().pending.count(sample_id(env3)) == 1; }));
  cancel3 = true;
  t3.join();
  CHECK(r.error.find("cancelled") == 0);
  CHECK(server.interrupts() == interrupts);
  CHECK(direct.queue().pending.count(sample_id(env3)) == 0);
  server.hold = false;
  blocker.join();
}

TEST_CASE("comfyui: outputs from and inputs into ComfyUI's directories", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  json o = options_for(server);
  o["outputs_from"] = "directory";
  o["output_dir"] = server.root() + "/output";
  o["inputs_to"] = "directory";
  o["input_dir"] = server.root() + "/input";
  auto senv = env_in(dir, "80");
  auto s = make_sampler(params(o))->sample(job(), "", senv);
  INFO(s.error);
  REQUIRE(s.outcome == "ok");
  // What vidline fetched from the output directory it also removed.
  CHECK(!std::filesystem::exists(server.root() + "/output/vidline/" + sample_id(senv)));
  auto denv = env_in(dir, "81", "video");
  auto d = make_decoder(params(o, "decoder_d"))->decode(job(), senv.output_path, s.sha256, denv);
  INFO(d.error);
  REQUIRE(d.outcome == "ok");
  CHECK(std::filesystem::file_size(denv.output_path) > 0);
  auto did = comfyui::prompt_id_for("comfy", "decoder_d", "decode", job(), denv.work_dir, s.sha256);
  CHECK(!std::filesystem::exists(server.root() + "/input/vidline/" + did));
}

TEST_CASE("comfyui: the test server refuses a foreign Origin, as ComfyUI does, ours sends none", "[comfyui]") {
  temp_dir dir;
  comfyui_server server(dir.path() + "/comfy");
  httplib::Client c("127.0.0.1", server.port());
  auto r = c.Get("/queue", httplib::Headers{{"Origin", "http://evil.example"}});
  REQUIRE(r);
  CHECK(r->status == 403);
  CHECK(server.origin_refusals() == 1);
  comfyui::client ours(comfyui::endpoint::parse(server.url()));
  CHECK_NOTHROW(ours.queue());
  CHECK(ours.system_stats()["system"]["comfyui_version"] == "0.3.64-test");
  CHECK(ours.object_info().contains("SaveLatent"));
  CHECK(server.origin_refusals() == 1);
}
