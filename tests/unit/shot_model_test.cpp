// The shot model end to end in pure code: a mixed shot list (two images per shot, LoRA
// names, per-shot negative prompts) read against the cluster's workflows, refused naming the
// line and field, turned into jobs with defaults applied, recorded in the run index, and
// carried to the `exec` placeholders and the `worker` protocol.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/decoder/output_index.hpp"
#include "backends/exec/exec_options.hpp"
#include "backends/worker/protocol.hpp"
#include "common/sha256.hpp"
#include "config/shot_identity.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using nlohmann::json;

namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

config::catalog fl2v_catalog() {
  config::backend b;
  b.name = "line";
  b.type = "sim";
  config::workflow t2v;
  t2v.name = "t2v";
  t2v.model = "h3-t2v";
  t2v.is_default = true;
  t2v.params.push_back({"steps", "integer", 1.0, 100.0, {}, json(30), false});
  config::workflow fl2v;
  fl2v.name = "fl2v";
  fl2v.model = "h3-fl2v-int8";
  fl2v.params.push_back({"lora", "string", std::nullopt, std::nullopt, {"none", "turbo"},
                         json("none"), false});
  fl2v.params.push_back({"lora_strength", "number", 0.0, 2.0, {}, json(1.0), false});
  fl2v.params.push_back({"steps", "integer", 1.0, 100.0, {}, json(8), false});
  fl2v.inputs = {{"first_frame", true}, {"last_frame", true}};
  b.workflows = {t2v, fl2v};
  config::cluster c;
  c.backends["line"] = b;
  return config::catalog_for(c);
}

std::string read(const std::string& dir, const std::string& name, const std::string& text,
                 nodes::verbs::shot_list& out, const config::catalog& cat) {
  write(dir + "/" + name, text);
  return nodes::verbs::read_shot_file(dir + "/" + name, config::knobs{}, 1000, out, &cat);
}

} // namespace

TEST_CASE("a mixed shot list: two images per shot, LoRAs, per-shot negative prompts") {
  testing_support::temp_dir d("vl-shot-model");
  write(d.path() + "/a.png", "first frame");
  write(d.path() + "/b.png", "last frame");
  write(d.path() + "/c.png", "another last frame");
  const auto cat = fl2v_catalog();
  nodes::verbs::shot_list l;
  auto why = read(d.path(), "list.jsonl",
                  "{\"prompt\": \"she turns\", \"workflow\": \"fl2v\", \"width\": 416, \"height\": "
                  "736, \"seconds\": 5, \"seed\": 7, \"name\": \"s01\", \"negative_prompt\": "
                  "\"blurry\", \"params\": {\"lora\": \"turbo\", \"lora_strength\": 0.8}, "
                  "\"inputs\": {\"first_frame\": \"a.png\", \"last_frame\": \"b.png\"}}\n"
                  "{\"prompt\": \"rain\", \"workflow\": \"fl2v\", \"width\": 416, \"height\": 736, "
                  "\"seconds\": 5, \"seed\": 8, \"name\": \"s02\", \"negative_prompt\": \"text\", "
                  "\"params\": {\"steps\": 12}, "
                  "\"inputs\": {\"first_frame\": \"a.png\", \"last_frame\": \"c.png\"}}\n"
                  "{\"prompt\": \"the street\", \"width\": 416, \"height\": 736, \"seconds\": 5, "
                  "\"seed\": 9}\n",
                  l, cat);
  REQUIRE(why == "");
  REQUIRE(l.shots.size() == 3);
  CHECK(l.shots[0].inputs.size() == 2);
  CHECK(l.shots[0].inputs[0].sha256 == to_hex(sha256_of(std::string("first frame"))));
  CHECK(l.shots[0].inputs[0].path == d.path() + "/a.png");

  auto jobs = actors::coordinator::shot_jobs(l.shots, "run-1", "", "", &cat);
  REQUIRE(jobs.size() == 3);
  CHECK(jobs[0].workflow == "fl2v");
  CHECK(jobs[0].model == "h3-fl2v-int8");
  CHECK(jobs[0].negative_prompt == "blurry");
  REQUIRE(jobs[0].params.size() == 3);  // lora, lora_strength given; steps by default
  CHECK(jobs[0].params[0].text == "turbo");
  CHECK(jobs[0].params[1].text == "0.8");
  CHECK(jobs[0].params[2].text == "8");
  CHECK(jobs[1].params[0].text == "none");  // the default LoRA
  CHECK(jobs[1].params[2].text == "12");
  CHECK(jobs[1].inputs[1].sha256 == to_hex(sha256_of(std::string("another last frame"))));
  CHECK(jobs[2].workflow == "t2v");  // the default workflow and its default steps
  CHECK(jobs[2].model == "h3-t2v");
  CHECK(jobs[2].params.size() == 1);
  CHECK(config::ident(jobs[0]) != config::ident(jobs[1]));

  // exec: each stage's argv gets the shot's values.
  std::map<std::string, std::string> v{{"workflow", jobs[0].workflow},
                                       {"negative_prompt", jobs[0].negative_prompt}};
  for (auto& p : jobs[0].params)
    v["param." + p.name] = p.text;
  for (auto& i : jobs[0].inputs)
    v["input." + i.name] = i.path;
  CHECK(backends::exec::expand("--lora={param.lora}:{param.lora_strength}", v) == "--lora=turbo:0.8");
  CHECK(backends::exec::expand("{input.first_frame}", v) == d.path() + "/a.png");
  CHECK(backends::exec::expand("{workflow}/{negative_prompt}/[{param.absent}]", v) == "fl2v/blurry/[]");

  // worker: the request carries them (protocol 2) and reads back.
  backends::worker::request r;
  r.id = "1";
  r.stage = "sample";
  r.output = "/o";
  r.workflow = jobs[0].workflow;
  r.model = jobs[0].model;
  r.negative_prompt = jobs[0].negative_prompt;
  for (auto& p : jobs[0].params)
    r.params_json.emplace_back(p.name, config::param_json(p).dump());
  for (auto& i : jobs[0].inputs)
    r.named_inputs.emplace_back(i.name, i.path);
  auto line = backends::worker::encode_request(r);
  auto j = json::parse(line);
  CHECK(j["v"] == 2);
  CHECK(j["job"]["params"]["lora_strength"] == 0.8);
  CHECK(j["job"]["params"]["steps"] == 8);
  CHECK(j["inputs"]["last_frame"] == d.path() + "/b.png");
  std::string err;
  auto back = backends::worker::decode_request(line.substr(0, line.size() - 1), err);
  REQUIRE(back);
  CHECK(back->workflow == "fl2v");
  CHECK(back->named_inputs.size() == 2);
  // A worker's line of version 1 is still read; one of version 3 is refused, naming both.
  CHECK(backends::worker::decode_worker_line(R"({"v":1,"type":"pong","seq":1})", err));
  CHECK_FALSE(backends::worker::decode_worker_line(R"({"v":3,"type":"pong","seq":1})", err));
  CHECK(err == "protocol version 3, this node speaks 1 to 2");
}

TEST_CASE("bad workflows, params and inputs are refused naming the line and field") {
  testing_support::temp_dir d("vl-shot-model");
  write(d.path() + "/a.png", "first frame");
  const auto cat = fl2v_catalog();
  nodes::verbs::shot_list l;
  const std::string head = R"({"prompt": "p", "width": 416, "height": 736, "seconds": 5, "seed": 1, )";
  auto one = [&](const std::string& rest) {
    return read(d.path(), "bad.jsonl", "# comment\n" + head + rest + "}\n", l, cat);
  };
  const std::string at = d.path() + "/bad.jsonl:2: ";
  CHECK(one(R"("workflow": "i2v")") == at + "workflow: unknown workflow 'i2v' (declared: t2v, fl2v)");
  CHECK(one(R"("params": {"steps": 400})") == at + "params.steps: must be from 1 to 100, got 400");
  CHECK(one(R"("workflow": "fl2v", "inputs": {"first_frame": "a.png"})")
        == at + "inputs.last_frame: required by workflow 'fl2v'");
  CHECK(one(R"("workflow": "fl2v", "inputs": {"first_frame": "a.png", "last_frame": "nope.png"})")
        == at + "inputs.last_frame: " + d.path() + "/nope.png does not exist");
  CHECK(one(R"("params": {"steps": [1]})")
        == at + "params.steps: must be a string, number or boolean, got array");
  CHECK(one(R"("negative_prompt": 3)") == at + "negative_prompt: must be a string");

  // CSV: param. and input. columns, cells read as the declared types.
  write(d.path() + "/b.png", "last frame");
  auto why = read(d.path(), "list.csv",
                  "prompt,workflow,width,height,seconds,seed,param.steps,param.lora,"
                  "input.first_frame,input.last_frame\n"
                  "she turns,fl2v,416,736,5,7,12,turbo,a.png,b.png\n",
                  l, cat);
  REQUIRE(why == "");
  REQUIRE(l.shots[0].params.size() == 3);
  CHECK(l.shots[0].params[2].name == "steps");
  CHECK(l.shots[0].params[2].type == "integer");
  CHECK(read(d.path(), "bad.csv",
             "prompt,width,height,seconds,seed,param.steps\np,416,736,5,1,many\n", l, cat)
        == d.path() + "/bad.csv:2: params.steps: must be an integer, got the string \"many\"");
}

TEST_CASE("an edited prompt: another ident, and the index line carries the new prompt digest") {
  msg::decode_order o;
  o.job.run_id = "r";
  o.job.prompt = "a red fox";
  o.job.prompt_sha256 = to_hex(sha256_of(o.job.prompt));
  o.job.workflow = "default";
  o.job.model = "sim";
  o.job.params = {{"steps", "integer", "8"}};
  o.job.inputs = {{"reference", std::string(64, 'a')}};
  actors::decoder::entry e;
  e.order = o;
  e.output = "/out/s01.simvideo";
  auto first = json::parse(actors::decoder::line(e));
  CHECK(first["prompt_sha256"] == to_hex(sha256_of(std::string("a red fox"))));
  CHECK(first["workflow"] == "default");
  CHECK(first["model"] == "sim");
  CHECK(first["params"]["steps"] == 8);
  CHECK(first["inputs"]["reference"] == std::string(64, 'a'));
  CHECK(first["ident"] == to_hex(config::ident(o.job)));
  CHECK(first.contains("vidline_version"));

  e.order.job.prompt = "a red fox at dusk";
  e.order.job.prompt_sha256 = to_hex(sha256_of(e.order.job.prompt));
  auto second = json::parse(actors::decoder::line(e));
  CHECK(second["prompt_sha256"] == to_hex(sha256_of(std::string("a red fox at dusk"))));
  CHECK(second["ident"] != first["ident"]);
}

TEST_CASE("the sampled model's identity: journaled with the job, written in the index line") {
  actors::coordinator::job j;
  j.spec.run_id = "r";
  j.spec.model = "fox-v1";
  j.sampled_model = "fox-v1";
  j.model_identity = "sha256:" + std::string(64, 'c');
  auto back = actors::coordinator::job_from_record(actors::coordinator::job_record(j));
  CHECK(back.sampled_model == "fox-v1");
  CHECK(back.model_identity == j.model_identity);
  auto old = actors::coordinator::job_record(j);
  old.erase("sampled_model");
  old.erase("model_identity");
  auto from_old = actors::coordinator::job_from_record(old);  // a journal older than the fields
  CHECK(from_old.sampled_model.empty());
  CHECK(from_old.model_identity.empty());

  actors::decoder::entry e;
  e.order.job = j.spec;
  e.output = "/out/fox.mp4";
  CHECK(json::parse(actors::decoder::line(e))["model_identity"].is_null());
  e.order.model_identity = j.model_identity;
  auto l = json::parse(actors::decoder::line(e));
  CHECK(l["model_identity"] == j.model_identity);
  CHECK(l["model"] == "fox-v1");
}
