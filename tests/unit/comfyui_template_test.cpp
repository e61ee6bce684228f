// ComfyUI workflow templates: typed substitution, no value ever escapes its string, errors
// name the place; a seeded fuzz run over random templates and hostile values; the example
// workflows render; the latent bundle round-trips; prompt ids are canonical and stable.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "backends/comfyui/bundle.hpp"
#include "backends/comfyui/client.hpp"
#include "backends/comfyui/comfyui_options.hpp"
#include "backends/comfyui/template.hpp"
#include "config/config.hpp"
#include "tests/support/processes.hpp"

using namespace vidline::backends::comfyui;
using json = nlohmann::json;

namespace {

const std::string examples = std::string(VIDLINE_SOURCE_DIR) + "/config/examples/";

template_values job_values() {
  return {{"prompt", "a \"quoted\" prompt with \\ backslash, {{seed}} and \n newline"},
          {"negative_prompt", ""},
          {"seed", uint64_t{18446744073709551615ull}},
          {"width", 416},
          {"height", 736},
          {"seconds", 5},
          {"frames", 121},
          {"fps", 24},
          {"latent_prefix", "vidline/abc/latent"},
          {"run_id", "r1"},
          {"index", 0},
          {"job", "r1-0"}};
}

} // namespace

TEST_CASE("a whole-string placeholder becomes the typed value, inside a string, its text", "[comfyui]") {
  json t = {{"1", {{"class_type", "KSampler"}, {"inputs", {{"seed", "{{seed}}"}, {"steps", 6}}}}},
            {"2", {{"class_type", "SaveLatent"},
                   {"inputs", {{"filename_prefix", "{{latent_prefix}}_video_{{width}}"}, {"samples", {"1", 0}}}}}},
            {"3", {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", "{{prompt}}"}}}}}};
  auto r = render(t, job_values());
  REQUIRE(r.ok);
  CHECK(r.workflow["1"]["inputs"]["seed"].is_number_unsigned());
  CHECK(r.workflow["1"]["inputs"]["seed"].get<uint64_t>() == 18446744073709551615ull);
  CHECK(r.workflow["2"]["inputs"]["filename_prefix"] == "vidline/abc/latent_video_416");
  CHECK(r.workflow["2"]["inputs"]["samples"] == json::array({"1", 0}));
  // The prompt stays one string, byte for byte, and its "{{seed}}" is not substituted.
  CHECK(r.workflow["3"]["inputs"]["text"] == job_values()["prompt"]);
  auto text = r.workflow.dump();
  CHECK(json::parse(text) == r.workflow);
}

TEST_CASE("template errors name the place", "[comfyui]") {
  auto err = [](json t) {
    auto r = render(t, job_values());
    return r.ok ? std::string("ok") : r.where + ": " + r.error;
  };
  CHECK(err({{"1", {{"inputs", {{"seed", "{{sed}}"}}}}}}).find("/1/inputs/seed: unknown placeholder {{sed}}") == 0);
  CHECK(err({{"1", {{"inputs", {{"x", "{{ seed }}"}}}}}}).find("/1/inputs/x: '{{ seed }}' is not a placeholder") == 0);
  CHECK(err({{"1", {{"inputs", {{"x", "{{seed"}}}}}}) == "/1/inputs/x: '{{' without '}}'");
  CHECK(err({{"1", {{"inputs", {{"{{seed}}", 1}}}}}}) == "/1/inputs/{{seed}}: placeholders are not allowed in keys");
  CHECK(err({{"a/b", {{"x", {"{{nope}}"}}}}}).find("/a~1b/x/0: unknown placeholder") == 0);
  CHECK(err({{"1", {{"text", "single } and { braces are fine"}}}}) == "ok");
  template_values bad = job_values();
  bad["prompt"] = std::string("\xff\xfe broken");
  auto r = render(json{{"1", {{"t", "{{prompt}}"}}}}, bad);
  CHECK(!r.ok);
  CHECK(r.error == "the value of {{prompt}} is not valid UTF-8");
  CHECK(!render(std::string_view("{not json"), job_values()).ok);
}

TEST_CASE("fuzz: random templates and hostile values never throw, never break out", "[comfyui][fuzz]") {
  auto seed = Catch::rngSeed() ? Catch::rngSeed() : 20240601u;
  INFO("seed " << seed << " (rerun with --rng-seed " << seed << ")");
  std::mt19937_64 rng(seed);
  const std::vector<std::string> atoms{"{{", "}}", "{", "}", "{{prompt}}", "{{seed}}", "{{width}}",
                                       "{{nope}}", "\"", "\\", "\n", "\x01", "\xc3\xa9", "\xff",
                                       "abc", " ", "{{prompt", "prompt}}", "\\u0000", "{{_x}}"};
  auto random_string = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s += atoms[rng() % atoms.size()];
    return s;
  };
  std::function<json(int)> random_json = [&](int depth) -> json {
    switch (rng() % (depth > 4 ? 3 : 5)) {
    case 0: return random_string(static_cast<int>(rng() % 4));
    case 1: return static_cast<int64_t>(rng() % 1000);
    case 2: return nullptr;
    case 3: {
      json a = json::array();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
        a.push_back(random_json(depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) {
        std::string k = std::to_string(rng() % 100);
        o[k] = random_json(depth + 1);
      }
      return o;
    }
    }
  };
  for (int round = 0; round < 3000; ++round) {
    template_values v = job_values();
    std::string hostile = random_string(static_cast<int>(rng() % 8));
    v["prompt"] = hostile;
    json t = random_json(0);
    render_result r;
    REQUIRE_NOTHROW(r = render(t, v));
    REQUIRE_NOTHROW(render(std::string_view(random_string(6)), v));
    if (!r.ok)
      continue;
    // What renders serialises, and parses back to itself: no value escaped its string.
    std::string dumped;
    REQUIRE_NOTHROW(dumped = r.workflow.dump());
    REQUIRE(json::parse(dumped) == r.workflow);
    // A whole-string {{prompt}} yields exactly the hostile value.
    json probe = {{"p", "{{prompt}}"}};
    auto pr = render(probe, v);
    if (pr.ok)
      REQUIRE(pr.workflow["p"] == hostile);
    else
      REQUIRE(pr.error == "the value of {{prompt}} is not valid UTF-8");
  }
}

TEST_CASE("the example workflows parse as options and render", "[comfyui]") {
  json o = {{"url", "http://127.0.0.1:8188"},
            {"sample_workflow", examples + "comfyui_workflow_sample_av.json"},
            {"latents", {{"video", "10"}, {"audio", "11"}}},
            {"decode_workflow", examples + "comfyui_workflow_decode_av.json"},
            {"video_output", "8"}};
  auto opts = parse_comfyui_options("comfy", o);
  REQUIRE(opts.sample_workflow);
  auto r = render(*opts.sample_workflow, job_values());
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK(r.workflow["8"]["inputs"]["seed"] == 18446744073709551615ull);
  CHECK(r.workflow["5"]["inputs"]["length"] == 121);
  CHECK(r.workflow["10"]["inputs"]["filename_prefix"] == "vidline/abc/latent_video");
  CHECK(check_api_format(r.workflow) == "");
  auto uses = placeholders_of(*opts.decode_workflow);
  CHECK(std::find(uses.begin(), uses.end(), "latent_audio") != uses.end());

  auto error_of = [&](json change) {
    json x = o;
    x.merge_patch(change);
    try {
      parse_comfyui_options("comfy", x);
    } catch (const vidline::config::config_error& e) {
      return std::string(e.what());
    }
    return std::string("none");
  };
  CHECK(error_of({{"url", "https://x:1"}}).find("/backends/comfy/options/url") == 0);
  CHECK(error_of({{"url", "http://127.0.0.1"}}).find("has no port") != std::string::npos);
  CHECK(error_of({{"latents", {{"video", "99"}}}}) == "/backends/comfy/options/latents/video: the sample workflow has no node '99'");
  CHECK(error_of({{"video_output", "1"}}) == "none");
  CHECK(error_of({{"sample_workflow", "relative.json"}}).find("absolute path") != std::string::npos);
  CHECK(error_of({{"sample_workflow", {{"1", {{"class_type", "X"}, {"inputs", {{"a", "{{sead}}"}}}}}}}})
          .find("uses {{sead}}, which this stage does not have (did you mean 'seed'?)") != std::string::npos);
  CHECK(error_of({{"decode_workflow", {{"nodes", json::array()}, {"links", json::array()}}}})
          .find("UI-format") != std::string::npos);
  CHECK(error_of({{"outputs_from", "directory"}}).find("/backends/comfy/options/output_dir") == 0);
  CHECK(error_of({{"lantents", 1}}).find("unknown key 'lantents'") != std::string::npos);
}

TEST_CASE("prompt ids: lowercase canonical UUIDs, the same key the same id", "[comfyui]") {
  auto a = uuid_from("attempt 17");
  CHECK(is_canonical_uuid(a));
  CHECK(a == uuid_from("attempt 17"));
  CHECK(a != uuid_from("attempt 18"));
  CHECK(a[14] == '8');  // version 8
  CHECK(std::string("89ab").find(a[19]) != std::string::npos);
  CHECK(!is_canonical_uuid("8D3F0A4E-0000-4000-8000-000000000000"));
}

TEST_CASE("latent bundle: ustar round trip, damage and tricks refused", "[comfyui]") {
  testing_support::temp_dir dir;
  auto p = dir.path();
  std::ofstream(p + "/v") << std::string(1000, 'v');
  std::ofstream(p + "/a") << std::string(512, 'a');
  write_bundle(p + "/b.latent", {{"video", p + "/v"}, {"audio", p + "/a"}});
  CHECK(std::filesystem::file_size(p + "/b.latent") == 512 + 1024 + 512 + 512 + 1024);
  std::filesystem::create_directories(p + "/out");
  auto parts = read_bundle(p + "/b.latent", p + "/out");
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].part == "video");
  CHECK(testing_support::read_file(p + "/out/video.latent") == std::string(1000, 'v'));
  CHECK(testing_support::read_file(p + "/out/audio.latent") == std::string(512, 'a'));
  // Same parts, same bytes (mtime 0), so the same digest.
  write_bundle(p + "/c.latent", {{"video", p + "/v"}, {"audio", p + "/a"}});
  CHECK(testing_support::read_file(p + "/b.latent") == testing_support::read_file(p + "/c.latent"));

  CHECK_THROWS(write_bundle(p + "/d", {{"../x", p + "/v"}}));
  CHECK_THROWS(write_bundle(p + "/d", {{"v", p + "/v"}, {"v", p + "/a"}}));
  auto bytes = testing_support::read_file(p + "/b.latent");
  auto damaged = bytes;
  damaged[10] = 'X';
  std::ofstream(p + "/damaged", std::ios::binary) << damaged;
  CHECK_THROWS_WITH(read_bundle(p + "/damaged", p + "/out"), Catch::Contains("checksum"));
  std::ofstream(p + "/short", std::ios::binary) << bytes.substr(0, 700);
  CHECK_THROWS_WITH(read_bundle(p + "/short", p + "/out"), Catch::Contains("truncated"));
  std::ofstream(p + "/notar", std::ios::binary) << std::string(2048, 'z');
  CHECK_THROWS(read_bundle(p + "/notar", p + "/out"));
}
