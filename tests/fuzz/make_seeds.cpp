// Writes the fuzz targets' seed corpora: valid inputs of every kind plus edge cases, each
// a small file named for what it is. Deterministic: running it again rewrites the same
// bytes, so the committed corpora can be regenerated and diffed.
//
//   make_seeds <repo root> <output dir>     (writes <out>/frame, <out>/config, <out>/template)

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages/envelope.hpp"
#include "messages/messages.hpp"

namespace fs = std::filesystem;
namespace msg = vidline::msg;
using json = nlohmann::json;

namespace {

fs::path out_root;
int written = 0;

void put(const std::string& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_root / dir);
  std::ofstream f(out_root / dir / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f)
    throw std::runtime_error("cannot write " + (out_root / dir / name).string());
  ++written;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f)
    throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// -- frames ---------------------------------------------------------------------------------

const std::string sha_a(64, 'a');
const std::string sha_0 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

msg::envelope env(const char* type, const char* target, uint64_t id = 7) {
  msg::envelope e;
  e.type = type;
  e.id = id;
  e.sender = "alpha";
  e.correlation = 0;
  e.target = target;
  return e;
}

template <class T>
void frame(const std::string& name, const T& body, const char* target) {
  put("frame", name, msg::encode_frame(env(T::wire_name, target), msg::pack_body(body)));
}

template <class T>
void body_only(const std::string& name, const T& body) {
  put("frame", "body_" + name, msg::pack_body(body));
}

msg::job_spec job() {
  return {"20240101-120000-beef", 3, 42, 416, 736, 5, "a red fox in the snow, \"quoted\"", sha_0,
          ""};
}

msg::sample_result sample_result() {
  msg::sample_result r;
  r.pool = "left";
  r.host = "alpha";
  r.attempt = 11;
  r.run_id = "20240101-120000-beef";
  r.index = 3;
  r.outcome = msg::outcome::ok;
  r.latent_sha256 = sha_a;
  r.latent_bytes = 13u << 20;
  r.conditioning_s = 1.5;
  r.sampling_s = 300.25;
  r.cold = true;
  return r;
}

msg::decode_result decode_result() {
  msg::decode_result r;
  r.decoder = "decoder";
  r.host = "beta";
  r.attempt = 12;
  r.run_id = "20240101-120000-beef";
  r.index = 3;
  r.outcome = msg::outcome::corrupt;
  r.error = "sha256 mismatch";
  r.output = "/data/beta/outputs/r/job-3-42.mp4";
  r.stage = "handoff";
  return r;
}

void frame_seeds() {
  frame("sample_order", msg::sample_order{"left", 11, job()}, "pool:left");
  frame("sample_result", sample_result(), "coordinator");
  msg::pool_status ps;
  ps.pool = "left";
  ps.host = "alpha";
  ps.epoch = 0xfeedface;
  ps.busy_attempt = 11;
  ps.unacked = {sample_result(), sample_result()};
  ps.accepting = false;
  ps.seq = 99;
  frame("pool_status", ps, "coordinator");
  frame("result_ack", msg::result_ack{"left", 11}, "pool:left");
  frame("decode_order", msg::decode_order{"decoder", 12, job(), sha_a, 13u << 20, "alpha"},
        "decoder:decoder");
  frame("decode_result", decode_result(), "coordinator");
  msg::decoder_status ds;
  ds.decoder = "decoder";
  ds.host = "beta";
  ds.epoch = 5;
  ds.holding = {12, 13};
  ds.credits = 0;
  ds.unacked = {decode_result()};
  ds.seq = 3;
  frame("decoder_status", ds, "coordinator");
  frame("encode_request", msg::encode_request{sha_0, "test"}, "encoder");
  frame("encode_reply", msg::encode_reply{sha_0, "/data/c/x.cond", true, 0.5, ""}, "pool:left");
  frame("heartbeat", msg::heartbeat{"alpha", 0x1234567890abcdefull, 17, 1.7e9}, "");
  frame("peer_event", msg::peer_event{"beta", true, 77, true}, "coordinator");
  frame("latent_fetch", msg::latent_fetch{5, sha_a, 1u << 20, 1u << 20}, "");
  static const std::string chunk_data = "\x00\x01\x02\x03latent bytes\xff";
  msg::latent_chunk ch;
  ch.transfer_id = 5;
  ch.sha256 = sha_a;
  ch.offset = 0;
  ch.total = chunk_data.size();
  ch.data = msgpack::type::raw_ref(chunk_data.data(), static_cast<uint32_t>(chunk_data.size()));
  frame("latent_chunk", ch, "");
  msg::latent_chunk nf;
  nf.transfer_id = 6;
  nf.sha256 = sha_a;
  nf.error = "not found";
  frame("latent_chunk_not_found", nf, "");
  frame("submit_run",
        msg::submit_run{"both_plus_one", "a prompt", "", 416, 736, 5, 6, 1000, "req-1"}, "");
  frame("submit_reply", msg::submit_reply{"20240101-120000-beef", ""}, "");
  frame("status_query", msg::status_query{""}, "");
  frame("status_reply", msg::status_reply{"{\"run_id\":\"r\",\"jobs\":[]}", ""}, "");
  frame("resume_run", msg::resume_run{"20240101-120000-beef"}, "");
  frame("resume_reply", msg::resume_reply{"20240101-120000-beef", 2, "running", ""}, "");
  frame("shutdown", msg::shutdown_request{"demo finished"}, "");

  // Bodies on their own (the target also unpacks the whole input as a body).
  body_only("sample_order", msg::sample_order{"left", 11, job()});
  body_only("decode_result", decode_result());
  body_only("latent_fetch", msg::latent_fetch{5, sha_a, 0, 4096});
  // 2^64 as a double: msgpack-cxx 4.1.3's pack_double converts it to uint64_t, out of
  // range (tests/fuzz/ubsan.supp); NaN and -0.0 take the packer's other branches.
  msg::sample_result huge = sample_result();
  huge.sampling_s = 18446744073709551616.0;
  huge.conditioning_s = std::numeric_limits<double>::quiet_NaN();
  huge.cold = false;
  frame("sample_result_2pow64", huge, "coordinator");
  msg::heartbeat negzero{"alpha", 1, 1, -0.0};
  frame("heartbeat_negative_zero", negzero, "");
  body_only("submit_run", msg::submit_run{"m", "p", "/ref.png", 8, 8, 1, 1, 0, ""});
  put("frame", "body_empty_map", std::string("\x80", 1));
  put("frame", "body_unknown_field", std::string("\x81\xa3zzz\xc0", 6));
  put("frame", "body_wrong_type", std::string("\x81\xa5index\xa1x", 9));
  put("frame", "body_negative_uint", std::string("\x81\xa5index\xff", 8));
  put("frame", "body_float_as_int", std::string("\x81\xa5index\xcb\x3f\xf0\0\0\0\0\0\0", 16));

  // Envelopes that are refused, each at a different gate.
  const std::string good = msg::encode_frame(env("result_ack", "pool:left"),
                                             msg::pack_body(msg::result_ack{"left", 1}));
  put("frame", "edge_empty", "");
  put("frame", "edge_one_byte", std::string("\x90", 1));
  put("frame", "edge_truncated", good.substr(0, good.size() - 3));
  put("frame", "edge_trailing_byte", good + '\0');
  put("frame", "edge_not_array", std::string("\xa7VIDLINE", 8));
  put("frame", "edge_short_array", std::string("\x92\xa7VIDLINE\x01", 10));
  std::string bad_magic = good;
  bad_magic[2] = 'X';
  put("frame", "edge_bad_magic", bad_magic);
  put("frame", "edge_version_2",
      msg::encode_frame([] { auto e = env("result_ack", ""); e.version = 2; return e; }(), "\x80"));
  put("frame", "edge_id_zero", msg::encode_frame(env("result_ack", "", 0), "\x80"));
  put("frame", "edge_control_in_sender",
      msg::encode_frame([] { auto e = env("result_ack", ""); e.sender = "a\nb"; return e; }(),
                        "\x80"));
  put("frame", "edge_long_type",
      msg::encode_frame(env(std::string(300, 't').c_str(), ""), "\x80"));
  put("frame", "edge_unknown_type", msg::encode_frame(env("no_such_type", "x"), "\x80"));
  put("frame", "edge_body_not_map", msg::encode_frame(env("result_ack", ""), "\x93\x01\x02\x03"));
  put("frame", "edge_body_empty", msg::encode_frame(env("result_ack", ""), ""));
  // Claims that must not turn into allocations: an array of 2^32-1, a str of 4 GiB, a bin
  // longer than the frame, a map of 65535 pairs, nesting deeper than any limit.
  put("frame", "edge_huge_array", std::string("\xdd\xff\xff\xff\xff\x01", 6));
  put("frame", "edge_huge_str", std::string("\xdb\xff\xff\xff\xff" "abc", 8));
  put("frame", "edge_bin_past_end", std::string("\x98\xa7VIDLINE\x01\xa1t\x01\xa1s\x00\xa0\xc6\x00\x10\x00\x00", 22));
  put("frame", "edge_huge_map", std::string("\xde\xff\xff\x01\x02", 5));
  put("frame", "edge_deep_nesting", std::string(100, '\x91') + '\x01');
  put("frame", "edge_ext", std::string("\xd4\x01\x02", 3));
  put("frame", "edge_never_used_byte", std::string("\xc1", 1));
  put("frame", "edge_extra_fields", [] {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_array(10);
    pk.pack(std::string("VIDLINE"));
    pk.pack(1);
    pk.pack(std::string("status_query"));
    pk.pack(9);
    pk.pack(std::string("cli:42"));
    pk.pack(0);
    pk.pack(std::string(""));
    pk.pack_bin(1);
    pk.pack_bin_body("\x80", 1);
    pk.pack(std::string("a later field"));
    pk.pack_nil();
    return std::string(b.data(), b.size());
  }());
}

// -- configs --------------------------------------------------------------------------------

void config_seeds(const fs::path& root) {
  const fs::path examples = root / "config" / "examples";
  put("config", "reference", read_file(examples / "reference.json"));
  put("config", "two_hosts_small", read_file(examples / "two_hosts_small.json"));
  const json base = json::parse(read_file(examples / "two_hosts_small.json"));

  // Variants of a valid config: one change each, accepted or refused at a known field.
  auto variant = [&](const std::string& name, auto edit) {
    json j = base;
    edit(j);
    put("config", name, j.dump());
  };
  variant("compact", [](json&) {});
  variant("knobs_extreme", [](json& j) {
    j["knobs"] = {{"heartbeat_interval_ms", 1},       {"heartbeat_misses", 1000},
                  {"reconnect_min_ms", 1},            {"reconnect_max_ms", 3600000},
                  {"chunk_bytes", 16777216},          {"chunk_window", 1024},
                  {"max_frame_bytes", 1073741824},    {"max_prompt_bytes", 1073676288},
                  {"max_jobs_per_run", 4294967295u},  {"max_runs", 1},
                  {"sample_timeout_s", 2592000},      {"decode_timeout_s", 1e-9},
                  {"pool_restarts", {{"max_restarts", 0}, {"period_s", 86400}}}};
  });
  variant("knobs_unknown", [](json& j) { j["knobs"]["heartbeat_intervall_ms"] = 5; });
  variant("knobs_frame_too_small", [](json& j) { j["knobs"]["max_frame_bytes"] = 4096; });
  variant("knobs_negative", [](json& j) { j["knobs"]["chunk_window"] = -1; });
  variant("knobs_float_for_int", [](json& j) { j["knobs"]["chunk_window"] = 2.5; });
  variant("knobs_huge_number", [](json& j) { j["knobs"]["max_runs"] = 1e300; });
  variant("port_zero", [](json& j) { j["hosts"][0]["port"] = 0; });
  variant("port_string", [](json& j) { j["hosts"][0]["port"] = "7611"; });
  variant("data_dir_dotdot", [](json& j) { j["hosts"][0]["data_dir"] = "../../../../etc"; });
  variant("data_dir_absolute", [](json& j) { j["hosts"][0]["data_dir"] = "/var/lib/vidline"; });
  variant("data_dir_empty", [](json& j) { j["hosts"][0]["data_dir"] = ""; });
  variant("host_name_unicode", [](json& j) { j["hosts"][1]["name"] = "b\u00e9ta/../x"; });
  variant("duplicate_host", [](json& j) { j["hosts"].push_back(j["hosts"][0]); });
  variant("unknown_coordinator", [](json& j) { j["coordinator"] = "gamma"; });
  variant("pool_unknown_gpu", [](json& j) { j["pools"][0]["gpus"].push_back("gpu99"); });
  variant("pool_empty_profile", [](json& j) { j["pools"][0]["profile"] = ""; });
  variant("mode_empty", [](json& j) { j["modes"]["none"] = {{"pools", json::array()}, {"decoders", json::array()}}; });
  variant("mode_shares_gpu", [](json& j) {
    j["pools"][1]["gpus"] = {"gpu3", "gpu4", "gpu5", "gpu6"};
  });
  variant("backend_exec", [](json& j) {
    j["backends"]["x"] = {{"type", "exec"}, {"options", {{"sample", {{"argv", {"/bin/true", "{run_id}"}}}}}}};
  });
  variant("backend_comfyui", [](json& j) {
    j["backends"]["c"] = {{"type", "comfyui"}, {"options", {{"url", "http://127.0.0.1:8188"}}}};
  });
  variant("backend_sim_profile", [](json& j) {
    j["backends"]["sim"]["profile"] = "../profiles/p.json";
  });
  variant("backend_bad_type", [](json& j) { j["backends"]["sim"]["type"] = "docker"; });
  variant("backend_time_scale_on_exec", [](json& j) {
    j["backends"]["e"] = {{"type", "exec"}, {"time_scale", 1}};
  });
  variant("gpu_models_differ", [](json& j) { j["hosts"][0]["gpus"][1]["model"] = "A100"; });
  variant("gpu_model_only_brand", [](json& j) {
    for (auto& g : j["hosts"][0]["gpus"])
      g["model"] = "NVIDIA Tesla";
  });
  variant("missing_hosts", [](json& j) { j.erase("hosts"); });
  variant("hosts_object", [](json& j) { j["hosts"] = json::object(); });
  variant("modes_array", [](json& j) { j["modes"] = json::array(); });

  // Text-level edge cases the JSON parser sees before any reader.
  put("config", "edge_empty", "");
  put("config", "edge_not_object", "[1,2,3]");
  put("config", "edge_duplicate_key", "{\"cluster\":\"a\",\"cluster\":\"b\"}");
  put("config", "edge_nested_duplicate",
      "{\"hosts\":[{\"name\":\"a\",\"gpus\":[{\"id\":\"x\",\"id\":\"y\"}]}]}");
  put("config", "edge_deep", std::string(200, '[') + std::string(200, ']'));
  put("config", "edge_bad_utf8", "{\"cluster\":\"\xff\xfe\"}");
  put("config", "edge_nul_inside", std::string("{\"cluster\":\"a\0b\"}", sizeof("{\"cluster\":\"a\0b\"}") - 1));
  put("config", "edge_comment", "{/* no */ \"cluster\": \"a\"}");
  put("config", "edge_trailing_comma", "{\"cluster\": \"a\",}");
  put("config", "edge_big_exponent", "{\"knobs\":{\"max_runs\":1e999999}}");
  put("config", "edge_escapes", "{\"cluster\":\"\\u0000\\ud800\\udc00\\\"\"}");
  put("config", "edge_lone_surrogate", "{\"cluster\":\"\\ud800\"}");
}

// -- templates ------------------------------------------------------------------------------

const char* const values_json =
    "{\"prompt\":\"p \\\"q\\\" {{seed}}\",\"negative_prompt\":\"\",\"seed\":18446744073709551615,"
    "\"width\":416,\"height\":736,\"seconds\":5,\"frames\":121,\"fps\":24.0,"
    "\"latent_prefix\":\"vidline/x/latent\",\"output_prefix\":\"vidline/x/video\","
    "\"reference_image\":\"vidline/x/reference.png\",\"run_id\":\"r1\",\"index\":0,"
    "\"job\":\"r1-0\"}";

void template_seeds(const fs::path& root) {
  const fs::path examples = root / "config" / "examples";
  const std::string sample = read_file(examples / "comfyui_workflow_sample_av.json");
  const std::string decode = read_file(examples / "comfyui_workflow_decode_av.json");
  const std::string v(values_json);
  put("template", "sample_av", sample);
  put("template", "decode_av", decode);
  put("template", "sample_av_values", v + '\0' + sample);
  put("template", "decode_av_values", v + '\0' + decode);

  auto t = [&](const std::string& name, const std::string& text) { put("template", name, text); };
  auto tv = [&](const std::string& name, const std::string& values, const std::string& text) {
    put("template", name, values + '\0' + text);
  };
  t("whole_typed", "{\"1\":{\"class_type\":\"K\",\"inputs\":{\"seed\":\"{{seed}}\",\"w\":\"{{width}}\"}}}");
  t("inside_text", "{\"1\":{\"class_type\":\"S\",\"inputs\":{\"p\":\"a/{{run_id}}/b_{{index}}_{{job}}\"}}}");
  t("link", "{\"1\":{\"class_type\":\"A\",\"inputs\":{}},\"2\":{\"class_type\":\"B\",\"inputs\":{\"x\":[\"1\",0]}}}");
  t("dangling_link", "{\"2\":{\"class_type\":\"B\",\"inputs\":{\"x\":[\"9\",0]}}}");
  t("ui_format", "{\"nodes\":[],\"links\":[]}");
  t("no_placeholders", "{\"a\":[1,2.5,true,null,\"text\",{\"b\":\"{ single } braces\"}]}");
  t("unknown_placeholder", "{\"a\":\"{{nope}}\"}");
  t("malformed_open", "{\"a\":\"{{seed\"}");
  t("malformed_space", "{\"a\":\"{{ }}\"}");
  t("malformed_upper", "{\"a\":\"{{X}}\"}");
  t("placeholder_in_key", "{\"{{seed}}\":1}");
  t("triple_braces", "{\"a\":\"{{{seed}}}\",\"b\":\"{{seed}}}\"}");
  t("adjacent", "{\"a\":\"{{seed}}{{width}}\"}");
  t("bad_utf8_value", "{\"a\":\"x{{bad_utf8}}\"}");
  t("non_scalar_value", "{\"a\":\"{{prompt}}\"}");
  t("unicode", "{\"\\u00e9\":\"\\ud83d\\ude00 {{prompt}} \\u0000\"}");
  t("deep", std::string(80, '[') + "\"{{seed}}\"" + std::string(80, ']'));
  t("scalar_root", "\"{{seed}}\"");
  t("empty", "");
  t("not_json", "{\"a\":");
  tv("values_array", "{\"x\":[1,2]}", "{\"a\":\"{{x}}\"}");
  tv("values_object", "{\"x\":{\"y\":1}}", "{\"a\":\"pre {{x}}\"}");
  tv("values_null", "{\"x\":null}", "{\"a\":\"{{x}}\"}");
  tv("values_placeholder_text", "{\"x\":\"{{y}}\",\"y\":\"no\"}", "{\"a\":\"{{x}}\",\"b\":\"<{{x}}>\"}");
  tv("values_negative", "{\"x\":-9223372036854775808,\"f\":-0.0}", "{\"a\":\"{{x}}/{{f}}\"}");
  tv("values_not_object", "[1]", "{\"a\":\"{{seed}}\"}");
}

// -- dictionaries (libFuzzer -dict): the words each input language is made of -----------------

void dict(const std::string& target, const std::vector<std::string>& words) {
  std::string out = "# " + target + ": written by tests/fuzz/make_seeds.cpp\n";
  for (const auto& w : words) {
    out += '"';
    for (unsigned char c : w) {
      char buf[5];
      if (c == '"' || c == '\\' || c < 0x20 || c > 0x7e) {
        std::snprintf(buf, sizeof(buf), "\\x%02X", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    out += "\"\n";
  }
  fs::create_directories(out_root);
  std::ofstream(out_root / (target + ".dict"), std::ios::binary | std::ios::trunc) << out;
  ++written;
}

void dictionaries() {
  std::vector<std::string> frame{"\xa7VIDLINE", "\x98\xa7VIDLINE\x01"};
  for (const char* t : {"sample_order", "sample_result", "pool_status", "result_ack",
                        "decode_order", "decode_result", "decoder_status", "encode_request",
                        "encode_reply", "heartbeat", "peer_event", "latent_fetch",
                        "latent_chunk", "submit_run", "submit_reply", "status_query",
                        "status_reply", "resume_run", "resume_reply", "shutdown"})
    frame.push_back(std::string(1, static_cast<char>(0xa0 + std::string(t).size())) + t);
  for (const char* f : {"pool", "attempt", "job", "run_id", "index", "seed", "width", "height",
                        "seconds", "prompt", "prompt_sha256", "reference", "host", "outcome",
                        "error", "latent_sha256", "latent_bytes", "epoch", "unacked", "seq",
                        "target", "decoder", "source_host", "output", "holding", "credits",
                        "capacity", "transfer_id", "sha256", "offset", "length", "total",
                        "data", "boot_id", "up", "restarted", "mode", "count", "request_id",
                        "json", "reason"})
    frame.push_back(std::string(1, static_cast<char>(0xa0 + std::string(f).size())) + f);
  dict("frame", frame);

  std::vector<std::string> config{"{", "}", "[", "]", ":", ",", "\"\"", "true", "null", "0",
                                  "-1", "1e3", "4294967296", "\"../\"", "\"/\""};
  for (const char* k : {"cluster", "coordinator", "hosts", "name", "address", "port", "data_dir",
                        "gpus", "id", "model", "vendor", "memory_gib", "index", "backends",
                        "type", "time_scale", "profile", "options", "pools", "host", "backend",
                        "decoders", "gpu", "encoders", "modes", "knobs", "sim", "exec",
                        "comfyui", "nvidia", "amd", "intel", "cpu", "max_restarts", "period_s",
                        "heartbeat_interval_ms", "heartbeat_misses", "reconnect_min_ms",
                        "reconnect_max_ms", "status_interval_ms", "order_resend_ms",
                        "sample_timeout_s", "decode_timeout_s", "max_attempts",
                        "handoff_retries", "chunk_bytes", "chunk_window", "transfer_timeout_ms",
                        "max_frame_bytes", "max_prompt_bytes", "max_jobs_per_run", "max_runs",
                        "pool_restarts", "decoder_restarts", "encoder_restarts",
                        "coordinator_restarts", "log_file_bytes", "log_files"})
    config.push_back("\"" + std::string(k) + "\"");
  dict("config", config);

  std::vector<std::string> tmpl{"{{", "}}", "{", "}", "[", "]", "\"class_type\"",
                                "\"inputs\"", "\"nodes\"", "\"links\"", "\\u0000",
                                "\\ud800", "\\\"", std::string(1, '\0')};
  for (const char* n : {"prompt", "negative_prompt", "seed", "width", "height", "seconds",
                        "frames", "fps", "reference_image", "latent_prefix", "output_prefix",
                        "run_id", "index", "job", "bad_utf8"}) {
    tmpl.push_back("\"{{" + std::string(n) + "}}\"");
    tmpl.push_back("\"" + std::string(n) + "\"");
  }
  dict("template", tmpl);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds <repo root> <output dir>\n");
    return 2;
  }
  try {
    out_root = argv[2];
    for (const char* d : {"frame", "config", "template"})
      fs::remove_all(out_root / d);
    frame_seeds();
    config_seeds(argv[1]);
    template_seeds(argv[1]);
    dictionaries();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  std::printf("make_seeds: %d files under %s\n", written, argv[2]);
  return 0;
}
