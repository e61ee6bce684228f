// Two real node processes run a batch through the comfyui backend against three test
// ComfyUI servers in this process (one per pool, one for the decoder): sampling workflows
// end in SaveLatent (video and audio), the decoder's workflow loads both and saves the
// video. Checks every video against the latent parts that reached it, and that no prompt
// ran twice. Second case: a pool's server restarts mid-batch, losing its history. Third: a
// shot list on the Wan workflows of config/examples/comfyui_wan.json (image-to-video,
// first+last frame), each shot's images, LoRA, params and negative prompt checked in the
// prompt its server received.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>

#include "backends/comfyui/bundle.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/comfyui_server.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::comfyui_server;
using testing_support::process;
using testing_support::temp_dir;
using nlohmann::json;
using testing_support::start_node;
using testing_support::coordinator_answers;

namespace {

const std::string examples = std::string(VIDLINE_SOURCE_DIR) + "/config/examples/";

json comfy_backend(const comfyui_server& s) {
  return {{"type", "comfyui"},
          {"options",
           {{"url", s.url()},
            {"sample_workflow", examples + "comfyui_workflow_sample_av.json"},
            {"latents", {{"video", "10"}, {"audio", "11"}}},
            {"decode_workflow", examples + "comfyui_workflow_decode_av.json"},
            {"video_output", "8"},
            {"poll_interval_s", 0.05},
            {"unreachable_s", 20}}}};
}

json gpu(const std::string& id, const std::string& model, const std::string& vendor, int index) {
  return {{"id", id}, {"model", model}, {"vendor", vendor}, {"memory_gib", 16}, {"index", index}};
}

/// The two-host line of these tests; `backends` holds comfy_left, comfy_right, comfy_dec.
std::string write_config(const std::string& dir, const json& backends) {
  auto ports = testing_support::free_ports(2);
  json cfg = {
    {"cluster", "comfy_line"},
    {"coordinator", "alpha"},
    {"hosts",
     {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
       {"gpus", {gpu("t0", "Tesla T10", "nvidia", 0), gpu("t1", "Tesla T10", "nvidia", 1)}}},
      {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]}, {"data_dir", dir + "/beta"},
       {"gpus", {gpu("d0", "RTX 3080 Ti", "nvidia", 0), gpu("x0", "RX 7900 XTX", "amd", 0)}}}}},
    {"backends", backends},
    {"pools",
     {{{"name", "left"}, {"host", "alpha"}, {"gpus", {"t0", "t1"}}, {"backend", "comfy_left"}},
      {{"name", "xtx"}, {"host", "beta"}, {"gpus", {"x0"}}, {"backend", "comfy_right"}}}},
    {"decoders", {{{"name", "dec"}, {"host", "beta"}, {"gpu", "d0"}, {"backend", "comfy_dec"}}}},
    {"encoders",
     {{{"name", "enc_a"}, {"host", "alpha"}, {"gpus", {"t0"}}, {"backend", "comfy_left"}},
      {{"name", "enc_b"}, {"host", "beta"}, {"gpus", {"x0"}}, {"backend", "comfy_right"}}}},
    {"modes", {{"both", {{"pools", {"left", "xtx"}}, {"decoders", {"dec"}}}}}},
    {"knobs", {{"heartbeat_interval_ms", 300}, {"status_interval_ms", 200},
               {"order_resend_ms", 3000}, {"sample_timeout_s", 60}, {"decode_timeout_s", 60},
               // The check below reads each latent after its job is done: keep them.
               {"latent_retention_s", 3600}}}};
  auto path = dir + "/cluster.json";
  testing_support::add_keys(cfg, dir);
  std::ofstream(path) << cfg.dump(2);
  return path;
}

std::string write_config(const std::string& dir, const comfyui_server& left,
                         const comfyui_server& right, const comfyui_server& dec) {
  return write_config(dir, {{"comfy_left", comfy_backend(left)}, {"comfy_right", comfy_backend(right)},
                            {"comfy_dec", comfy_backend(dec)}});
}

/// A backend of config/examples/comfyui_wan.json pointed at `s`: its workflows as they
/// are, the example's workflow files by absolute path.
json wan_example_backend(const std::string& name, const comfyui_server& s) {
  json b = json::parse(testing_support::read_file(examples + "comfyui_wan.json"))["backends"][name];
  json& o = b["options"];
  o["url"] = s.url();
  for (const char* key : {"sample_workflow", "decode_workflow"})
    if (o.contains(key))
      o[key] = examples + std::filesystem::path(o[key].get<std::string>()).filename().string();
  if (b.contains("workflows"))
    for (auto& w : b["workflows"])
      w["template"] = examples + w["template"].get<std::string>();
  o["poll_interval_s"] = 0.05;
  o["unreachable_s"] = 20;
  return b;
}

std::string submit(nodes::verbs::coordinator_client& cl, uint32_t count, const std::string& request_id) {
  msg::submit_run req;
  req.mode = "both";
  req.prompt = "a comfy line: \"quotes\", {{seed}} braces, \\ backslash\nand a newline";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = count;
  req.seed = 987654321123ull;
  req.request_id = request_id;
  auto id = cl.submit(req);
  REQUIRE(!id.empty());
  return id;
}

json wait_run(nodes::verbs::coordinator_client& cl, const std::string& run_id, process& a, process& b) {
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

/// "" when the job's video names the digests of both latent parts its pool saved.
std::string video_problem(const json& j, const std::string& dir) {
  if (j["state"] != "succeeded")
    return "state " + j["state"].get<std::string>() + ": " + j["error"].dump();
  std::string sha = j["latent_sha256"];
  std::string host = j["pool"] == "left" ? "alpha" : "beta";
  std::string latent = dir + "/" + host + "/latents/" + sha + ".latent";
  if (sha256_file_hex(latent) != sha)
    return "latent " + latent + " is missing or does not hash to " + sha;
  std::string unpack = dir + "/unpacked-" + std::to_string(j["index"].get<int>());
  std::filesystem::create_directories(unpack);
  auto parts = backends::comfyui::read_bundle(latent, unpack);
  if (parts.size() != 2)
    return "latent bundle has " + std::to_string(parts.size()) + " parts";
  std::string video = testing_support::read_file(j["output"].get<std::string>());
  for (auto& p : parts)
    if (video.find(sha256_file_hex(p.path)) == std::string::npos)
      return "the video does not name part " + p.part;
  // The test server's latents describe the workflow that made them: this job's seed.
  std::string seed = "\"seed\":" + std::to_string(j["seed"].get<uint64_t>());
  for (auto& p : parts)
    if (testing_support::read_file(p.path).find(seed) == std::string::npos)
      return "latent part " + p.part + " was not sampled with this job's seed";
  return "";
}

void stop(process& a, process& b) {
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  CHECK(a.wait(20) == 0);
  CHECK(b.wait(20) == 0);
}

} // namespace

TEST_CASE("two nodes run a batch through comfyui against test servers") {
  temp_dir dir;
  comfyui_server left(dir.path() + "/comfy_left"), right(dir.path() + "/comfy_right"),
    dec(dir.path() + "/comfy_dec");
  left.exec_delay_s = right.exec_delay_s = 0.2;
  dec.exec_delay_s = 0.05;
  auto config = write_config(dir.path(), left, right, dec);
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  auto run_id = submit(cl, 6, "comfy-line");
  json st = wait_run(cl, run_id, *a, *b);
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 6);
  std::set<std::string> pools;
  for (auto& j : st["jobs"]) {
    CHECK(video_problem(j, dir.path()) == "");
    CHECK(j["attempts"] == 1);
    pools.insert(j["pool"].get<std::string>());
  }
  CHECK(pools == std::set<std::string>{"left", "xtx"});
  // Every prompt ran exactly once; sampling split across the two servers; six decodes.
  for (auto* s : {&left, &right, &dec}) {
    for (auto& id : s->submitted_ids())
      CHECK(s->executions(id) == 1);
    CHECK(s->origin_refusals() == 0);
  }
  CHECK(left.total_executions() + right.total_executions() == 6);
  CHECK(dec.total_executions() == 6);
  stop(*a, *b);
}

TEST_CASE("comfyui line: a pool's server restarts mid-batch and loses its history") {
  temp_dir dir;
  comfyui_server left(dir.path() + "/comfy_left"), right(dir.path() + "/comfy_right"),
    dec(dir.path() + "/comfy_dec");
  left.exec_delay_s = right.exec_delay_s = 0.3;
  dec.exec_delay_s = 0.05;
  auto config = write_config(dir.path(), left, right, dec);
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  left.hold = true;  // keep the first prompt running until the restart
  auto run_id = submit(cl, 4, "comfy-restart");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (left.submissions() == 0) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waiting for the first prompt
  }
  left.restart(1.0);
  left.hold = false;
  json st = wait_run(cl, run_id, *a, *b);
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  for (auto& j : st["jobs"]) {
    CHECK(video_problem(j, dir.path()) == "");
    CHECK(j["attempts"] == 1);  // the lost prompt was resubmitted within its attempt
  }
  CHECK(left.submissions() >= 2);
  stop(*a, *b);
}

TEST_CASE("comfyui line: a shot list on the Wan example workflows reaches its servers with each shot's values") {
  temp_dir dir;
  comfyui_server left(dir.path() + "/comfy_left"), right(dir.path() + "/comfy_right"),
    dec(dir.path() + "/comfy_dec");
  left.exec_delay_s = right.exec_delay_s = 0.1;
  dec.exec_delay_s = 0.05;
  auto config = write_config(dir.path(), {{"comfy_left", wan_example_backend("comfy_wan", left)},
                                          {"comfy_right", wan_example_backend("comfy_wan", right)},
                                          {"comfy_dec", wan_example_backend("comfy_wan_decode", dec)}});
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  // What each shot should reach its server with; "" = the workflow's or backend's default.
  struct shot {
    std::string name, workflow, lora, negative;
    double lora_strength, cfg;
    int steps;
    std::vector<std::string> images;  ///< first_frame, then last_frame
  };
  const std::vector<shot> shots = {
    {"fl-harbour", "flf2v", "wan21_harbour_style.safetensors", "blurry, text, watermark", 0.6, 4.5, 12,
     {"harbour-a.png", "harbour-b.png"}},
    {"i2v-street", "i2v", "wan21_rain.safetensors", "extra fingers, \"quoted\" {{seed}}", 1.25, 6.0, 8,
     {"street.png"}},
    {"fl-plain", "flf2v", "", "", 1.0, 5.0, 20, {"plain-a.png", "plain-b.png"}},
  };
  const std::string backend_negative = wan_example_backend("comfy_wan", left)["options"]["negative_prompt"];
  std::filesystem::create_directories(dir.path() + "/frames");
  std::map<std::string, std::string> image_sha;
  std::string list;
  for (auto& sh : shots) {
    json inputs = json::object();
    const char* names[] = {"first_frame", "last_frame"};
    for (std::size_t i = 0; i < sh.images.size(); ++i) {
      const std::string bytes = "PNG of " + sh.images[i];
      std::ofstream(dir.path() + "/frames/" + sh.images[i]) << bytes;
      image_sha[sh.images[i]] = to_hex(sha256_of(bytes));
      inputs[names[i]] = "frames/" + sh.images[i];
    }
    json line = {{"prompt", "shot " + sh.name}, {"workflow", sh.workflow}, {"width", 416}, {"height", 736},
                 {"seconds", 5}, {"seed", 1000 + list.size()}, {"name", sh.name}, {"inputs", inputs}};
    if (!sh.lora.empty())
      line["params"] = {{"lora", sh.lora}, {"lora_strength", sh.lora_strength}, {"cfg", sh.cfg}, {"steps", sh.steps}};
    if (!sh.negative.empty())
      line["negative_prompt"] = sh.negative;
    list += line.dump() + "\n";
  }
  std::ofstream(dir.path() + "/shots.jsonl") << list;
  auto run_id = testing_support::submit_shot_list(dir.path(), config, "both", dir.path() + "/shots.jsonl");
  json st = wait_run(cl, run_id, *a, *b);
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == shots.size());

  // Each server's prompts by the shot they sampled (node 5 holds the prompt text).
  std::map<std::string, std::pair<json, const comfyui_server*>> sampled;
  for (auto* s : {&left, &right})
    for (auto& id : s->submitted_ids()) {
      json w = s->workflow_of(id);
      sampled[w["5"]["inputs"]["text"].get<std::string>().substr(5)] = {w, s};
    }
  REQUIRE(sampled.size() == shots.size());
  for (auto& sh : shots) {
    INFO(sh.name);
    REQUIRE(sampled.count(sh.name) == 1);
    const json& w = sampled[sh.name].first;
    const std::string input_dir = sampled[sh.name].second->root() + "/input/";
    const bool fl = sh.workflow == "flf2v";
    CHECK(w["13"]["class_type"] == (fl ? "WanFirstLastFrameToVideo" : "WanImageToVideo"));
    CHECK(w["1"]["inputs"]["unet_name"] ==
          (fl ? "wan2.1_flf2v_720p_14B_fp16.safetensors" : "wan2.1_i2v_480p_14B_fp16.safetensors"));
    // The shot's params, or the workflow's defaults, typed as KSampler and the LoRA loader want.
    CHECK(w["2"]["inputs"]["lora_name"] == (sh.lora.empty() ? "wan21_style.safetensors" : sh.lora));
    CHECK(w["2"]["inputs"]["strength_model"] == sh.lora_strength);
    CHECK(w["14"]["inputs"]["steps"] == sh.steps);
    CHECK(w["14"]["inputs"]["cfg"] == sh.cfg);
    CHECK(w["6"]["inputs"]["text"] == (sh.negative.empty() ? backend_negative : sh.negative));
    CHECK(w["13"]["inputs"]["length"] == 5 * 16 + 1);  // the example's fps 16, frame_offset 1
    CHECK(w["13"]["inputs"]["width"] == 416);
    // Each image uploaded, and the loader names that upload.
    CHECK(sha256_file_hex(input_dir + w["9"]["inputs"]["image"].get<std::string>()) == image_sha[sh.images[0]]);
    if (fl)
      CHECK(sha256_file_hex(input_dir + w["10"]["inputs"]["image"].get<std::string>()) == image_sha[sh.images[1]]);
    else
      CHECK_FALSE(w.contains("10"));
  }
  // The status records each shot's workflow, model and inputs; every video names its latent.
  for (auto& j : st["jobs"]) {
    INFO(j.dump());
    CHECK(j["state"] == "succeeded");
    CHECK(j["model"] == (j["workflow"] == "flf2v" ? "wan21-flf2v-14b-720p" : "wan21-i2v-14b-480p"));
    CHECK(j["inputs"].size() == (j["workflow"] == "flf2v" ? 2u : 1u));
    std::string sha = j["latent_sha256"];
    std::string host = j["pool"] == "left" ? "alpha" : "beta";
    const std::string unpack = dir.path() + "/unpacked-" + j["name"].get<std::string>();
    std::filesystem::create_directories(unpack);
    auto parts = backends::comfyui::read_bundle(dir.path() + "/" + host + "/latents/" + sha + ".latent", unpack);
    REQUIRE(parts.size() == 1);
    CHECK(testing_support::read_file(j["output"].get<std::string>()).find(sha256_file_hex(parts[0].path)) !=
          std::string::npos);
  }
  CHECK(dec.total_executions() == static_cast<int>(shots.size()));
  stop(*a, *b);
}
