// Workflows declared in the config and the one check of a shot against them
// (config/workflows.hpp): defaults, types, ranges, choices, inputs, errors naming the field.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "config/shot_identity.hpp"
#include "config/workflows.hpp"

namespace {

using namespace vidline;
using nlohmann::json;

json base_config() {
  return json::parse(R"({
    "cluster": "wf", "coordinator": "a", "plaintext": true,
    "hosts": [{"name": "a", "address": "127.0.0.1", "port": 7000, "data_dir": "/tmp/wf-a",
               "gpus": [{"id": "g0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16,
                         "index": 0},
                        {"id": "g1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16,
                         "index": 1}]}],
    "backends": {"sim": {"type": "sim"}},
    "pools": [{"name": "p", "host": "a", "gpus": ["g0"], "backend": "sim"}],
    "decoders": [{"name": "d", "host": "a", "gpu": "g1", "backend": "sim"}],
    "encoders": [{"name": "e", "host": "a", "gpus": ["g0"], "backend": "sim"}],
    "modes": {"m": {"pools": ["p"], "decoders": ["d"]}}
  })");
}

json workflows() {
  return json::parse(R"([
    {"name": "t2v", "model": "h3-t2v", "default": true,
     "params": {"steps": {"type": "integer", "min": 1, "max": 100, "default": 30},
                "cfg": {"type": "number", "min": 0, "max": 20},
                "lora": {"type": "string", "choices": ["none", "turbo"], "default": "none"}}},
    {"name": "fl2v", "model": "h3-fl2v-int8",
     "params": {"steps": {"type": "integer", "default": 8}, "tiled": {"type": "boolean"}},
     "inputs": {"first_frame": {"required": true}, "last_frame": {"required": true},
                "reference": {}}}
  ])");
}

config::catalog catalog_of(const json& cfg) {
  return config::catalog_for(config::parse(cfg.dump(), "/tmp"));
}

std::string config_error_of(const json& cfg) {
  try {
    config::parse(cfg.dump(), "/tmp");
  } catch (const config::config_error& e) {
    return e.what();
  }
  return "";
}

msg::shot shot_of(const json& j) {
  msg::shot s;
  s.prompt = "p";
  s.workflow = j.value("workflow", "");
  if (j.contains("params"))
    REQUIRE(config::params_from_json(j["params"], s.params) == "");
  if (j.contains("inputs"))
    for (auto& [n, v] : j["inputs"].items()) {
      msg::job_input in;
      REQUIRE(config::input_from_json(n, v, true, in) == "");
      s.inputs.push_back(in);
    }
  return s;
}

} // namespace

TEST_CASE("a backend without workflows offers the implicit default", "[workflows]") {
  auto cat = catalog_of(base_config());
  REQUIRE(cat.workflows.size() == 1);
  CHECK(cat.default_name == "default");
  CHECK(cat.workflows[0].model == "sim");
  config::resolved_shot r;
  msg::shot s;
  s.reference = "/abs/ref.png";
  s.reference_sha256 = std::string(64, 'a');
  REQUIRE(config::resolve_shot(cat, s, r) == "");
  CHECK(r.workflow == "default");
  CHECK(r.model == "sim");
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0].name == "reference");
  CHECK(r.inputs[0].sha256 == std::string(64, 'a'));
  // The config's digest is the same as before workflows existed.
  auto cfg = base_config();
  CHECK(config::to_json(config::parse(cfg.dump(), "/tmp"))["backends"]["sim"].count("workflows") == 0);
}

TEST_CASE("defaults applied, params sorted, values typed", "[workflows]") {
  auto cfg = base_config();
  cfg["backends"]["sim"]["workflows"] = workflows();
  auto cat = catalog_of(cfg);
  CHECK(cat.default_name == "t2v");
  config::resolved_shot r;
  REQUIRE(config::resolve_shot(cat, shot_of({{"params", {{"cfg", 2.5}}}}), r) == "");
  CHECK(r.workflow == "t2v");
  CHECK(r.model == "h3-t2v");
  REQUIRE(r.params.size() == 3);
  CHECK(r.params[0].name == "cfg");
  CHECK(r.params[0].text == "2.5");
  CHECK(r.params[1].name == "lora");
  CHECK(r.params[1].text == "none");
  CHECK(r.params[2].name == "steps");
  CHECK(r.params[2].text == "30");
  CHECK(r.params[2].type == "integer");
  // A number param takes an integer as it is written.
  REQUIRE(config::resolve_shot(cat, shot_of({{"params", {{"cfg", 7}}}}), r) == "");
  CHECK(r.params[0].text == "7");

  // CSV cells: text read as the declared type.
  msg::shot csv;
  csv.prompt = "p";
  csv.workflow = "fl2v";
  csv.params = {{"steps", "string", "12"}, {"tiled", "string", "true"}};
  csv.inputs = {{"first_frame", std::string(64, 'a')}, {"last_frame", std::string(64, 'b')}};
  REQUIRE(config::resolve_shot(cat, csv, r, true) == "");
  CHECK(r.params[0].type == "integer");
  CHECK(r.params[0].text == "12");
  CHECK(r.params[1].type == "boolean");
  CHECK(r.params[1].text == "true");
  CHECK(r.inputs.size() == 2);
}

TEST_CASE("bad workflows, params and inputs are refused naming the field", "[workflows]") {
  auto cfg = base_config();
  cfg["backends"]["sim"]["workflows"] = workflows();
  auto cat = catalog_of(cfg);
  config::resolved_shot r;
  auto why = [&](const json& j) { return config::resolve_shot(cat, shot_of(j), r); };
  CHECK(why({{"workflow", "i2v"}}) == "workflow: unknown workflow 'i2v' (declared: t2v, fl2v)");
  CHECK(why({{"params", {{"stepz", 3}}}}).rfind("params.stepz: workflow 't2v' has no such", 0) == 0);
  CHECK(why({{"params", {{"steps", 0}}}}) == "params.steps: must be from 1 to 100, got 0");
  CHECK(why({{"params", {{"steps", 2.5}}}}) == "params.steps: must be an integer, got number 2.5");
  CHECK(why({{"params", {{"steps", "ten"}}}})
        == "params.steps: must be an integer, got the string \"ten\"");
  CHECK(why({{"params", {{"lora", "other"}}}})
        == "params.lora: must be one of \"none\", \"turbo\", got \"other\"");
  CHECK(why({{"workflow", "fl2v"}, {"inputs", {{"first_frame", "/a.png"}}}})
        == "inputs.last_frame: required by workflow 'fl2v'");
  CHECK(why({{"inputs", {{"first_frame", "/a.png"}}}}).rfind("inputs.first_frame: workflow 't2v' "
                                                            "takes no such input", 0) == 0);
  msg::shot twice = shot_of({{"workflow", "fl2v"},
                             {"inputs", {{"first_frame", "/a.png"}, {"last_frame", "/b.png"},
                                         {"reference", "/c.png"}}}});
  twice.reference = "/d.png";
  CHECK(config::resolve_shot(cat, twice, r)
        == "reference: given twice (as reference and as inputs.reference)");
  std::vector<msg::param_value> ps;
  CHECK(config::params_from_json(json{{"x", json::array()}}, ps)
        == "params.x: must be a string, number or boolean, got array");
  msg::job_input in;
  CHECK(config::input_from_json("a", "/x.png", false, in).find("PUT /v1/inputs") != std::string::npos);
  CHECK(config::input_from_json("a", json{{"sha256", "xyz"}}, true, in)
        == "sha256: must be 64 lowercase hex digits (an input uploaded first)");
}

TEST_CASE("workflow declarations are checked where they are read", "[workflows]") {
  auto with = [](json wf) {
    auto cfg = base_config();
    cfg["backends"]["sim"]["workflows"] = std::move(wf);
    return config_error_of(cfg);
  };
  CHECK(with(workflows()) == "");
  auto w = workflows();
  w[1]["default"] = true;
  CHECK(with(w) == "/backends/sim/workflows: more than one workflow says \"default\": true");
  w = workflows();
  w[0]["params"]["steps"]["default"] = 500;
  CHECK(with(w) == "/backends/sim/workflows/0/params/steps/default: must be from 1 to 100, got 500");
  w = workflows();
  w[0]["params"]["steps"]["type"] = "int";
  CHECK(with(w).rfind("/backends/sim/workflows/0/params/steps/type:", 0) == 0);
  w = workflows();
  w[1]["name"] = "t2v";
  CHECK(with(w) == "/backends/sim/workflows/1/name: workflow 't2v' is declared twice");
  w = workflows();
  w[0]["template"] = "x.json";
  CHECK(with(w).rfind("/backends/sim/workflows/0/template: 'template' applies only", 0) == 0);
  CHECK(with(json::array()).rfind("/backends/sim/workflows: must declare at least one", 0) == 0);
}

TEST_CASE("a workflow that continues from a latent declares it on its input", "[workflows]") {
  auto cfg = base_config();
  auto w = workflows();
  w.push_back(json::parse(R"({"name": "extend", "model": "h3-t2v",
                              "inputs": {"init_latent": {"required": true, "latent": true}}})"));
  cfg["backends"]["sim"]["workflows"] = w;
  REQUIRE(config_error_of(cfg) == "");
  auto cat = catalog_of(cfg);
  const auto* extend = cat.find("extend");
  REQUIRE(extend != nullptr);
  REQUIRE(extend->find_input("init_latent") != nullptr);
  CHECK(extend->find_input("init_latent")->latent);
  CHECK_FALSE(cat.find("fl2v")->find_input("first_frame")->latent);
  config::resolved_shot r;
  auto why = [&](const json& j) { return config::resolve_shot(cat, shot_of(j), r); };
  const json latent = {{"from", "s1"}, {"latent", true}};
  CHECK(why({{"workflow", "extend"}, {"inputs", {{"init_latent", latent}}}}) == "");
  CHECK(r.inputs.at(0).latent);
  // A latent where the workflow takes a frame or a file, and the other way round: refused.
  CHECK(why({{"workflow", "fl2v"}, {"inputs", {{"first_frame", latent}, {"last_frame", "/b.png"}}}})
        == "inputs.first_frame: latent: workflow 'fl2v' does not continue from a latent here "
           "(its config declares no \"latent\": true on input first_frame); take a frame "
           "(\"frame\": \"last\")");
  CHECK(why({{"workflow", "extend"}, {"inputs", {{"init_latent", {{"from", "s1"}}}}}})
        == "inputs.init_latent: workflow 'extend' continues from another shot's latent here: "
           "{\"from\": \"SHOT\", \"latent\": true}, not a file or a frame");
  CHECK(why({{"workflow", "extend"}, {"inputs", {{"init_latent", "/a.latent"}}}})
        .rfind("inputs.init_latent: workflow 'extend' continues from another shot's latent", 0)
        == 0);
  // The declaration is read as the rest is: a boolean, and never on the reference image.
  auto bad = w;
  bad[2]["inputs"]["init_latent"]["latent"] = "yes";
  cfg["backends"]["sim"]["workflows"] = bad;
  CHECK(config_error_of(cfg)
        == "/backends/sim/workflows/2/inputs/init_latent/latent: must be true or false, got string");
  bad = w;
  bad[1]["inputs"]["reference"] = {{"latent", true}};
  cfg["backends"]["sim"]["workflows"] = bad;
  CHECK(config_error_of(cfg).rfind("/backends/sim/workflows/1/inputs/reference/latent: "
                                   "'reference' is an image", 0) == 0);
  bad = w;
  bad[2]["inputs"]["init_latent"]["latnet"] = true;
  cfg["backends"]["sim"]["workflows"] = bad;
  CHECK(config_error_of(cfg).find("latnet") != std::string::npos);
}

TEST_CASE("a param's number text is JSON's shortest round-trip form, as Python writes it", "[workflows]") {
  using vidline::config::number_text;
  CHECK(number_text(0.1) == "0.1");
  CHECK(number_text(2.5) == "2.5");
  CHECK(number_text(1e-07) == "1e-07");
  CHECK(number_text(3.0) == "3.0");
  CHECK(number_text(0.0001) == "0.0001");
  CHECK(number_text(1e-05) == "1e-05");
  // Where nlohmann alone would write an exponent and Python does not.
  CHECK(number_text(1e15) == "1000000000000000.0");
  CHECK(number_text(1000000000000000.5) == "1000000000000000.5");
  CHECK(number_text(-1.5e15) == "-1500000000000000.0");
  CHECK(number_text(1e16) == "1e+16");
  auto p = vidline::config::param_of("cfg", nlohmann::json::parse("1e15"));
  REQUIRE(p);
  CHECK(p->type == "number");
  CHECK(p->text == "1000000000000000.0");
}
