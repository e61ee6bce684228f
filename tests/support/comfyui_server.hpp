#pragma once
// A ComfyUI stand-in for tests, in-process, over real HTTP (cpp-httplib). It follows
// ComfyUI 0.3.64 (server.py and execution.py of that release; docs/backends.md, "The test
// double"), errors included.
//
// What it reproduces: POST /prompt (any prompt_id string, a UUID made up when there is
// none; `number` counts from 0 and is spent by refused prompts too; "number" and "front"
// in the body; validation from the output nodes back: a node without class_type or of an
// unknown class is 400 invalid_prompt "Node ID '#N'", no output node is 400
// prompt_no_outputs, every output failing is 400 prompt_outputs_failed_validation, some
// failing is 200 with node_errors and only the valid outputs run); one prompt runs at a
// time, in `number` order; GET /history/{id} is {} until the prompt has ended; GET/POST
// /queue; POST /interrupt (optionally for one prompt_id); GET /view (400 on ".." in the
// name, 403 for a subfolder outside the directory, 404 when missing); POST /upload/image
// (multipart, overwrite); GET /system_stats (`cpu_only`: one "cpu" device whose index is
// null, as under --cpu), /object_info; every route also under /api; 403 when a request to
// a loopback Host carries an Origin of another host. Faults: `restart()` loses queue and
// history and refuses connections for a while; `response_delay_s` makes every answer
// slow; `fail_with` makes a prompt end in execution_error; `hold` keeps the running prompt
// running.
//
// Node classes do no ML: each node's value is a JSON description of its inputs, so files
// are deterministic functions of the workflow. SaveLatent writes
// <output>/<prefix>_NNNNN_.latent ("FAKE-LATENT\n" + the JSON of its samples); LoadLatent
// and LoadImage read input files (their value names the file's SHA-256); SaveVideo writes
// <output>/<prefix>_NNNNN_.mp4 holding the JSON of its video input.

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/sha256.hpp"

namespace testing_support {

class comfyui_server {
public:
  using json = nlohmann::json;

  /// Input kinds a node class checks: 'i' integer, 'f' number, 's' string, 'l' link,
  /// '*' anything. Output nodes are listed separately; `optional` names the inputs of the
  /// class's "optional" section, which a node may leave out.
  struct node_class {
    std::map<std::string, char> inputs;
    bool output = false;
    std::set<std::string> optional = {};
  };

  /// The classes of the example workflows (LTX-2's are core from ComfyUI 0.8.0, not in
  /// 0.3.64; the Wan ones' inputs are those of 0.8.0) and of the tests' own, with the
  /// inputs the examples give them.
  static std::map<std::string, node_class> default_classes() {
    const std::map<std::string, char> wan_latent = {
      {"positive", 'l'}, {"negative", 'l'}, {"vae", 'l'}, {"width", 'i'}, {"height", 'i'},
      {"length", 'i'}, {"batch_size", 'i'}};
    auto with = [](std::map<std::string, char> m, std::initializer_list<const char*> links) {
      for (auto* n : links)
        m[n] = 'l';
      return m;
    };
    return {
      {"UNETLoader", {{{"unet_name", 's'}, {"weight_dtype", 's'}}, false}},
      {"LoraLoaderModelOnly", {{{"model", 'l'}, {"lora_name", 's'}, {"strength_model", 'f'}}, false}},
      {"ModelSamplingSD3", {{{"model", 'l'}, {"shift", 'f'}}, false}},
      {"CLIPLoader", {{{"clip_name", 's'}, {"type", 's'}, {"device", 's'}}, false, {"device"}}},
      {"CLIPVisionLoader", {{{"clip_name", 's'}}, false}},
      {"CLIPVisionEncode", {{{"clip_vision", 'l'}, {"image", 'l'}, {"crop", 's'}}, false}},
      {"WanImageToVideo", {with(wan_latent, {"clip_vision_output", "start_image"}), false,
                           {"clip_vision_output", "start_image"}}},
      {"WanFirstLastFrameToVideo",
       {with(wan_latent, {"clip_vision_start_image", "clip_vision_end_image", "start_image", "end_image"}),
        false, {"clip_vision_start_image", "clip_vision_end_image", "start_image", "end_image"}}},
      {"CheckpointLoaderSimple", {{{"ckpt_name", 's'}}, false}},
      {"CLIPTextEncode", {{{"text", 's'}, {"clip", 'l'}}, false}},
      {"EmptyLTXVLatentVideo", {{{"width", 'i'}, {"height", 'i'}, {"length", 'i'}, {"batch_size", 'i'}}, false}},
      {"LTXVEmptyLatentAudio", {{{"frames_number", 'i'}, {"frame_rate", 'i'}, {"batch_size", 'i'}, {"audio_vae", 'l'}}, false}},
      {"LTXVConcatAVLatent", {{{"video_latent", 'l'}, {"audio_latent", 'l'}}, false}},
      {"LTXVSeparateAVLatent", {{{"av_latent", 'l'}}, false}},
      {"LTXVConditioning", {{{"positive", 'l'}, {"negative", 'l'}, {"frame_rate", 'f'}}, false}},
      {"KSampler", {{{"model", 'l'}, {"seed", 'i'}, {"steps", 'i'}, {"cfg", 'f'}, {"sampler_name", 's'},
                     {"scheduler", 's'}, {"positive", 'l'}, {"negative", 'l'}, {"latent_image", 'l'},
                     {"denoise", 'f'}}, false}},
      {"LoadImage", {{{"image", 's'}}, false}},
      {"LTXVImgToVideoInplace", {{{"vae", 'l'}, {"image", 'l'}, {"latent", 'l'}, {"strength", 'f'}}, false}},
      {"SaveLatent", {{{"samples", 'l'}, {"filename_prefix", 's'}}, true}},
      {"LoadLatent", {{{"latent", 's'}}, false}},
      {"VAELoader", {{{"vae_name", 's'}}, false}},
      {"LTXVAudioVAELoader", {{{"ckpt_name", 's'}}, false}},
      {"VAEDecode", {{{"samples", 'l'}, {"vae", 'l'}}, false}},
      {"LTXVAudioVAEDecode", {{{"samples", 'l'}, {"audio_vae", 'l'}}, false}},
      {"CreateVideo", {{{"images", 'l'}, {"fps", 'f'}, {"audio", 'l'}}, false}},
      {"SaveVideo", {{{"video", 'l'}, {"filename_prefix", 's'}, {"format", 's'}, {"codec", 's'}}, true}},
    };
  }

  /// Serves `root`/input and `root`/output on 127.0.0.1:`port` (0 = any free port).
  explicit comfyui_server(std::string root, int port = 0) : root_(std::move(root)), port_(port) {
    std::filesystem::create_directories(root_ + "/input");
    std::filesystem::create_directories(root_ + "/output");
    classes_ = default_classes();
    worker_ = std::thread([this] { work(); });
    listen();
  }

  ~comfyui_server() {
    {
      std::lock_guard<std::mutex> l(m_);
      quit_ = true;
      interrupt_ = true;
    }
    cv_.notify_all();
    unlisten();
    worker_.join();
  }

  comfyui_server(const comfyui_server&) = delete;
  comfyui_server& operator=(const comfyui_server&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& root() const { return root_; }

  /// A restart: the queue and history are lost (the running prompt's end too), and for
  /// `down_s` nothing listens on the port.
  void restart(double down_s = 0.3) {
    unlisten();
    {
      std::lock_guard<std::mutex> l(m_);
      ++generation_;
      queue_.clear();
      history_.clear();
      interrupt_ = true;
    }
    cv_.notify_all();
    std::this_thread::sleep_for(std::chrono::duration<double>(down_s));
    listen();
  }

  // -- knobs and hooks (set before or during a test) --
  std::atomic<double> exec_delay_s{0.05};      ///< how long each prompt "runs"
  std::atomic<double> response_delay_s{0};     ///< every answer waits this long
  std::atomic<bool> hold{false};               ///< the running prompt does not end
  std::atomic<bool> cpu_only{false};           ///< /system_stats as under --cpu
  /// Called when a prompt runs; an object makes it end in execution_error with that data.
  std::function<std::optional<json>(const std::string& id, const json& workflow)> fail_with;

  // -- what happened --
  int executions(const std::string& id) {
    std::lock_guard<std::mutex> l(m_);
    return executions_.count(id) ? executions_[id] : 0;
  }
  int total_executions() {
    std::lock_guard<std::mutex> l(m_);
    int n = 0;
    for (auto& [k, v] : executions_)
      n += v;
    return n;
  }
  int submissions() { return submissions_.load(); }
  int interrupts() { return interrupts_.load(); }
  int origin_refusals() { return origin_refusals_.load(); }
  std::vector<std::string> submitted_ids() {
    std::lock_guard<std::mutex> l(m_);
    return submitted_ids_;
  }
  json workflow_of(const std::string& id) {
    std::lock_guard<std::mutex> l(m_);
    return workflows_.count(id) ? workflows_[id] : json();
  }
  bool running(const std::string& id) {
    std::lock_guard<std::mutex> l(m_);
    return running_ == id;
  }

private:
  struct queued {
    json number;   ///< as ComfyUI reports it (an integer, or the float a client sent)
    double order;  ///< the same, for the queue's order
    std::string id;
    json workflow;
    std::vector<std::string> outputs;  ///< the valid output nodes: what runs
  };

  /// str(uuid.uuid4()): what ComfyUI names a prompt sent without a prompt_id.
  std::string uuid4() {
    static const char* hex = "0123456789abcdef";
    std::string u;
    for (int i = 0; i < 32; ++i) {
      int d = static_cast<int>(rng_() & 15);
      if (i == 12)
        d = 4;
      if (i == 16)
        d = 8 | (d & 3);
      u += hex[d];
      if (i == 7 || i == 11 || i == 15 || i == 19)
        u += '-';
    }
    return u;
  }

  static double now_ms() {
    using namespace std::chrono;
    return static_cast<double>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
  }

  static void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }

  static json rejection(const std::string& type, const std::string& message, json node_errors = json::object(),
                        const std::string& details = "") {
    return {{"error", {{"type", type}, {"message", message}, {"details", details}, {"extra_info", json::object()}}},
            {"node_errors", node_errors}};
  }

  bool safe(const std::string& p) const {
    return p.find("..") == std::string::npos && (p.empty() || p[0] != '/');
  }

  /// Python's str(v) for a JSON value, as ComfyUI turns a prompt_id or a STRING input into
  /// text.
  static std::string python_str(const json& v) {
    if (v.is_string())
      return v.get<std::string>();
    if (v.is_null())
      return "None";
    if (v.is_boolean())
      return v.get<bool>() ? "True" : "False";
    return v.dump();
  }

  /// Python's int(v) / float(v): ComfyUI converts INT and FLOAT inputs so ("5" is 5, 7.9
  /// is 7); nullopt with Python's message when it cannot.
  static std::optional<json> python_int(const json& v, std::string& why) {
    if (v.is_number_integer() || v.is_boolean())
      return v.is_boolean() ? json(v.get<bool>() ? 1 : 0) : v;
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d))
        return json(static_cast<int64_t>(d));
      why = "cannot convert float " + std::string(std::isnan(d) ? "NaN" : "infinity") + " to integer";
      return std::nullopt;
    }
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      auto b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
      std::string t = b == std::string::npos ? "" : s.substr(b, e - b + 1);
      std::size_t digits = (!t.empty() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
      if (t.size() > digits && t.find_first_not_of("0123456789", digits) == std::string::npos) {
        try {
          return json(std::stoll(t));
        } catch (const std::out_of_range&) {  // Python has big ints; ComfyUI's INT inputs stop at 2^64
          why = "'" + s + "' is beyond 64 bits (this test server's limit)";
          return std::nullopt;
        }
      }
      why = "invalid literal for int() with base 10: '" + s + "'";
      return std::nullopt;
    }
    why = "int() argument must be a string, a bytes-like object or a real number, not '" +
          std::string(v.is_null() ? "NoneType" : "dict") + "'";
    return std::nullopt;
  }
  static std::optional<json> python_float(const json& v, std::string& why) {
    if (v.is_number() || v.is_boolean())
      return v.is_boolean() ? json(v.get<bool>() ? 1.0 : 0.0) : json(v.get<double>());
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      const char* start = s.c_str();
      char* end = nullptr;
      double d = std::strtod(start, &end);
      while (end != nullptr && (*end == ' ' || *end == '\t' || *end == '\n'))
        ++end;
      if (end != start && *end == '\0' && s.find_first_of("xX") == std::string::npos)
        return json(d);
      why = "could not convert string to float: '" + s + "'";
      return std::nullopt;
    }
    why = "float() argument must be a string or a real number, not '" +
          std::string(v.is_null() ? "NoneType" : "dict") + "'";
    return std::nullopt;
  }

  /// What ComfyUI raises where it indexes a dict with a key it lacks (KeyError).
  struct key_error : std::runtime_error {
    explicit key_error(const std::string& key) : std::runtime_error("'" + key + "'") {}
  };

  /// One node's verdict: valid, and the reasons of its own (none when only an input node
  /// failed).
  struct verdict {
    bool valid = true;
    json reasons = json::array();
  };

  /// execution.validate_inputs: node `id` and, through its links, every node it depends
  /// on, memoised in `validated`. Converts INT/FLOAT/STRING inputs in `w` in place, as
  /// ComfyUI does. Throws key_error where ComfyUI's own lookups fail.
  verdict validate_node(json& w, const std::string& id, std::map<std::string, verdict>& validated) {
    if (auto it = validated.find(id); it != validated.end())
      return it->second;
    if (!w[id].contains("inputs"))
      throw key_error("inputs");
    json& inputs = w[id]["inputs"];
    std::string cls = w[id]["class_type"];
    const node_class& c = classes_.at(cls);
    verdict v;
    for (auto& [name, kind] : c.inputs) {
      if (!inputs.is_object() || !inputs.contains(name)) {
        if (!optional_input(name) && !c.optional.count(name))
          v.reasons.push_back({{"type", "required_input_missing"}, {"message", "Required input is missing"},
                               {"details", name}, {"extra_info", {{"input_name", name}}}});
        continue;
      }
      json& val = inputs[name];
      if (val.is_array()) {  // a link: [node_id, output_index]
        if (val.size() != 2) {
          v.reasons.push_back({{"type", "bad_linked_input"},
                               {"message", "Bad linked input, must be a length-2 list of [node_id, slot_index]"},
                               {"details", name}, {"extra_info", {{"input_name", name}, {"received_value", val}}}});
          continue;
        }
        if (!val[0].is_string() || !w.contains(val[0].get<std::string>()))
          throw key_error(python_str(val[0]));
        std::string from = val[0];
        try {
          if (!validate_node(w, from, validated).valid)
            v.valid = false;
        } catch (const key_error& e) {
          v.valid = false;
          validated[from] = {false, json::array({{{"type", "exception_during_inner_validation"},
                                                  {"message", "Exception when validating inner node"},
                                                  {"details", e.what()},
                                                  {"extra_info", {{"input_name", name}, {"exception_type", "KeyError"},
                                                                  {"linked_node", val}}}}})};
        }
        continue;
      }
      if (val.is_object() && val.contains("__value__")) {
        json unwrapped = val["__value__"];
        val = unwrapped;
      }
      std::string why;
      std::optional<json> converted;
      if (kind == 'i')
        converted = python_int(val, why);
      else if (kind == 'f')
        converted = python_float(val, why);
      else if (kind == 's')
        converted = json(python_str(val));
      else
        converted = val;  // a link input given a value passes validation (and fails when run)
      if (!converted) {
        const char* type = kind == 'i' ? "INT" : "FLOAT";
        v.reasons.push_back({{"type", "invalid_input_type"},
                             {"message", std::string("Failed to convert an input value to a ") + type + " value"},
                             {"details", name + ", " + python_str(val) + ", " + why},
                             {"extra_info", {{"input_name", name}, {"received_value", val}}}});
        continue;
      }
      val = *converted;
    }
    // The loaders' VALIDATE_INPUTS: the file must exist in the input directory.
    for (const char* file_input : {"latent", "image"})
      if ((cls == "LoadLatent" || cls == "LoadImage") && inputs.is_object() && inputs.contains(file_input) &&
          inputs[file_input].is_string()) {
        std::string f = inputs[file_input];
        if (!safe(f) || !std::filesystem::is_regular_file(root_ + "/input/" + f))
          v.reasons.push_back({{"type", "custom_validation_failed"},
                               {"message", "Custom validation failed for node"},
                               {"details", std::string(file_input) + " - Invalid " +
                                             (cls == "LoadLatent" ? "latent" : "image") + " file: " + f},
                               {"extra_info", {{"input_name", file_input}}}});
      }
    if (!v.reasons.empty())
      v.valid = false;
    return validated[id] = v;
  }

  static bool optional_input(const std::string& name) { return name == "audio" || name == "denoise"; }

  /// execution.validate_prompt. Returns the error body and status when refused (400, or 500
  /// where ComfyUI itself raises), else status 200, the outputs to run and the
  /// node_errors of the outputs left out. Converts inputs in `w` as ComfyUI does.
  struct validation {
    int status = 200;
    json body;
    std::vector<std::string> outputs;
    json node_errors = json::object();
  };
  validation validate(json& w) {
    validation out;
    auto refuse = [&](const std::string& type, const std::string& message, const std::string& details) {
      out.status = 400;
      out.body = rejection(type, message, json::object(), details);
      return out;
    };
    if ((w.is_array() && w.empty()) || (w.is_string() && w.get<std::string>().empty()))
      return refuse("prompt_no_outputs", "Prompt has no outputs", "");
    if (!w.is_object()) {  // ComfyUI iterates it as a dict and raises: aiohttp's 500
      out.status = 500;
      return out;
    }
    std::vector<std::string> outputs;
    for (auto& [id, node] : w.items()) {
      if (!node.is_object() || !node.contains("class_type"))
        return refuse("invalid_prompt", "Cannot execute because a node is missing the class_type property.",
                      "Node ID '#" + id + "'");
      std::string cls = python_str(node["class_type"]);
      auto it = node["class_type"].is_string() ? classes_.find(cls) : classes_.end();
      if (it == classes_.end())
        return refuse("invalid_prompt", "Cannot execute because node " + cls + " does not exist.",
                      "Node ID '#" + id + "'");
      if (it->second.output)
        outputs.push_back(id);
    }
    if (outputs.empty())
      return refuse("prompt_no_outputs", "Prompt has no outputs", "");
    std::map<std::string, verdict> validated;
    std::string failed;  // "message: details" of the failed outputs' own reasons
    for (auto& o : outputs) {
      verdict v;
      try {
        v = validate_node(w, o, validated);
      } catch (const key_error& e) {
        v = {false, json::array({{{"type", "exception_during_validation"}, {"message", "Exception when validating node"},
                                  {"details", e.what()}, {"extra_info", {{"exception_type", "KeyError"}}}}})};
        validated[o] = v;
      }
      if (v.valid) {
        out.outputs.push_back(o);
        continue;
      }
      for (auto& r : v.reasons)
        failed += (failed.empty() ? "" : "\n") + r.value("message", "") + ": " + r.value("details", "");
      // As ComfyUI does: every node validated so far that has reasons lists this output.
      for (auto& [id, nv] : validated) {
        if (nv.valid || nv.reasons.empty())
          continue;
        if (!out.node_errors.contains(id))
          out.node_errors[id] = {{"errors", nv.reasons}, {"dependent_outputs", json::array()},
                                 {"class_type", w[id]["class_type"]}};
        out.node_errors[id]["dependent_outputs"].push_back(o);
      }
    }
    if (out.outputs.empty()) {
      refuse("prompt_outputs_failed_validation", "Prompt outputs failed validation", failed);
      out.body["node_errors"] = out.node_errors;
    }
    return out;
  }

  std::string file_sha(const std::string& path) { return vidline::sha256_file_hex(path); }

  /// Writes <output>/<prefix>_NNNNN_.<ext>; returns its {filename, subfolder, type}.
  json save(const std::string& prefix, const std::string& ext, const std::string& content) {
    auto slash = prefix.rfind('/');
    std::string sub = slash == std::string::npos ? "" : prefix.substr(0, slash);
    std::string stem = slash == std::string::npos ? prefix : prefix.substr(slash + 1);
    std::string dir = root_ + "/output" + (sub.empty() ? "" : "/" + sub);
    std::filesystem::create_directories(dir);
    int counter = 1;
    char name[512];
    for (;; ++counter) {
      std::snprintf(name, sizeof name, "%s_%05d_.%s", stem.c_str(), counter, ext.c_str());
      if (!std::filesystem::exists(dir + "/" + name))
        break;
    }
    std::ofstream(dir + "/" + name, std::ios::binary) << content;
    return {{"filename", name}, {"subfolder", sub}, {"type", "output"}};
  }

  /// Runs the output nodes `to_run` of a workflow and what they depend on: the value of
  /// every node, the outputs of output nodes; throws on a node that cannot run.
  json execute(const json& w, const std::vector<std::string>& to_run) {
    std::map<std::string, json> value;
    json outputs = json::object();
    std::function<json(const std::string&)> eval = [&](const std::string& id) -> json {
      if (value.count(id))
        return value[id];
      const json& node = w[id];
      std::string cls = node["class_type"];
      json in = json::object();
      const json given = node.value("inputs", json::object());
      for (auto& [k, v] : given.items()) {
        bool link = v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer();
        auto kind = classes_[cls].inputs.find(k);
        if (!link && kind != classes_[cls].inputs.end() && kind->second == 'l')
          throw std::runtime_error("node " + id + " (" + cls + "): input '" + k + "' is a value, not a link: " + v.dump());
        in[k] = link ? json{{"from", eval(v[0].get<std::string>())}, {"output", v[1]}} : v;
      }
      json out;
      if (cls == "SaveLatent") {
        auto f = save(in["filename_prefix"], "latent", "FAKE-LATENT\n" + in["samples"].dump());
        outputs[id] = {{"latents", {f}}};
      } else if (cls == "SaveVideo") {
        auto f = save(in["filename_prefix"], "mp4", in["video"].dump());
        outputs[id] = {{"images", {f}}, {"animated", {true}}};
      } else if (cls == "LoadLatent") {
        out = {{"latent_sha256", file_sha(root_ + "/input/" + in["latent"].get<std::string>())}};
      } else if (cls == "LoadImage") {
        out = {{"image_sha256", file_sha(root_ + "/input/" + in["image"].get<std::string>())}};
      } else {
        out = {{"class", cls}, {"inputs", in}};
      }
      return value[id] = out;
    };
    for (auto& id : to_run)
      eval(id);
    return outputs;
  }

  void work() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return quit_ || !queue_.empty(); });
      if (quit_)
        return;
      queued q = queue_.front();
      queue_.pop_front();
      running_ = q.id;
      running_item_ = {q.number, q.id, q.workflow, json::object(), q.outputs};
      interrupt_ = false;
      uint64_t gen = generation_;
      ++executions_[q.id];
      json messages = json::array({json::array({"execution_start", {{"prompt_id", q.id}, {"timestamp", now_ms()}}})});
      // "Run": wait out the delay (and any hold), unless interrupted.
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(exec_delay_s.load());
      while (!interrupt_ && !quit_ && (hold || std::chrono::steady_clock::now() < until))
        cv_.wait_for(l, std::chrono::milliseconds(5));
      bool interrupted = interrupt_;
      auto hook = fail_with;
      l.unlock();
      json outputs = json::object();
      std::optional<json> error;
      if (!interrupted) {
        if (hook)
          error = hook(q.id, q.workflow);
        if (!error) {
          try {
            outputs = execute(q.workflow, q.outputs);
          } catch (const std::exception& e) {
            error = json{{"exception_type", "RuntimeError"}, {"exception_message", e.what()}};
          }
        }
      }
      l.lock();
      running_.clear();
      if (gen != generation_)  // restarted meanwhile: its end is lost with the history
        continue;
      std::string status = "success";
      if (interrupted) {
        status = "error";
        messages.push_back({"execution_interrupted", {{"prompt_id", q.id}, {"node_id", "1"}, {"timestamp", now_ms()}}});
      } else if (error) {
        status = "error";
        json data = {{"prompt_id", q.id}, {"node_id", "1"}, {"node_type", "KSampler"}, {"executed", json::array()},
                     {"exception_message", ""}, {"exception_type", ""}, {"traceback", json::array()},
                     {"current_inputs", json::object()}, {"current_outputs", json::object()}, {"timestamp", now_ms()}};
        data.update(*error);
        messages.push_back({"execution_error", data});
      } else {
        messages.push_back({"execution_success", {{"prompt_id", q.id}, {"timestamp", now_ms()}}});
      }
      history_[q.id] = {{"prompt", {q.number, q.id, q.workflow, json::object(), q.outputs}},
                        {"outputs", outputs},
                        {"status", {{"status_str", status}, {"completed", status == "success"}, {"messages", messages}}},
                        {"meta", json::object()}};
    }
  }

  /// The hostname and port of "scheme://netloc/..." (an Origin) or of "//netloc" (a Host),
  /// lowercased, as Python's urllib splits them; port -1 when there is none.
  static std::pair<std::string, int> host_port(std::string netloc) {
    for (auto& ch : netloc)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (auto at = netloc.rfind('@'); at != std::string::npos)
      netloc = netloc.substr(at + 1);
    std::string host = netloc, port;
    if (!netloc.empty() && netloc[0] == '[') {
      auto close = netloc.find(']');
      host = netloc.substr(1, close == std::string::npos ? std::string::npos : close - 1);
      if (close != std::string::npos && close + 1 < netloc.size() && netloc[close + 1] == ':')
        port = netloc.substr(close + 2);
    } else if (auto colon = netloc.rfind(':'); colon != std::string::npos) {
      host = netloc.substr(0, colon);
      port = netloc.substr(colon + 1);
    }
    int p = port.empty() || port.find_first_not_of("0123456789") != std::string::npos ? -1 : std::stoi(port);
    return {host, p};
  }

  /// server.py's is_loopback, for the names a test uses.
  static bool loopback_name(const std::string& h) {
    return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0;
  }

  /// server.py's origin_only_middleware: refuses (403) a request whose Host is loopback and
  /// whose Origin names another host; an Origin of the same host passes.
  static bool foreign_origin(const httplib::Request& req) {
    if (!req.has_header("Host") || !req.has_header("Origin"))
      return false;
    std::string host = req.get_header_value("Host"), origin = req.get_header_value("Origin");
    auto scheme = origin.find("://");
    std::string netloc = scheme == std::string::npos ? "" : origin.substr(scheme + 3);
    netloc = netloc.substr(0, netloc.find_first_of("/?#"));
    for (auto& ch : host)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (auto& ch : netloc)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    auto [h_name, h_port] = host_port(host);
    auto [o_name, o_port] = host_port(netloc);
    std::string host_domain = o_port < 0 ? h_name : host;
    std::string origin_domain = h_port < 0 ? o_name : netloc;
    return loopback_name(h_name) && !host_domain.empty() && !origin_domain.empty() && host_domain != origin_domain;
  }

  void routes(httplib::Server& s) {
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      double d = response_delay_s.load();
      if (d > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(d));
      if (foreign_origin(req)) {
        ++origin_refusals_;
        res.status = 403;
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    for (std::string p : {"", "/api"}) {
      s.Post(p + "/prompt", [this](const httplib::Request& req, httplib::Response& res) { post_prompt(req, res); });
      s.Get(p + R"(/history/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
        std::lock_guard<std::mutex> l(m_);
        std::string id = req.matches[1];
        json out = json::object();
        if (history_.count(id))
          out[id] = history_[id];
        reply(res, 200, out);
      });
      s.Get(p + "/queue", [this](const httplib::Request&, httplib::Response& res) {
        std::lock_guard<std::mutex> l(m_);
        json running = json::array(), pending = json::array();
        if (!running_.empty())
          running.push_back(running_item_);
        for (auto& q : queue_)
          pending.push_back({q.number, q.id, q.workflow, json::object(), q.outputs});
        reply(res, 200, {{"queue_running", running}, {"queue_pending", pending}});
      });
      s.Post(p + "/queue", [this](const httplib::Request& req, httplib::Response& res) {
        json b = json::parse(req.body, nullptr, false);
        std::lock_guard<std::mutex> l(m_);
        if (b.is_object() && b.contains("delete") && b["delete"].is_array())
          for (auto& id : b["delete"])
            for (auto it = queue_.begin(); it != queue_.end(); ++it)
              if (id.is_string() && it->id == id.get<std::string>()) {
                queue_.erase(it);
                break;
              }
        if (b.is_object() && b.value("clear", false))
          queue_.clear();
        res.status = 200;
      });
      s.Post(p + "/interrupt", [this](const httplib::Request& req, httplib::Response& res) {
        json b = json::parse(req.body, nullptr, false);
        ++interrupts_;
        std::lock_guard<std::mutex> l(m_);
        std::string id = b.is_object() ? b.value("prompt_id", "") : "";
        if (!running_.empty() && (id.empty() || id == running_))
          interrupt_ = true;
        cv_.notify_all();
        res.status = 200;
      });
      s.Get(p + "/system_stats", [this](const httplib::Request&, httplib::Response& res) {
        // Under --cpu the one device is torch.device("cpu"): type "cpu", index None, the
        // machine's memory as its "vram".
        json device = cpu_only ? json{{"name", "cpu"}, {"type", "cpu"}, {"index", nullptr},
                                      {"vram_total", 68719476736ll}, {"vram_free", 34359738368ll},
                                      {"torch_vram_total", 68719476736ll}, {"torch_vram_free", 34359738368ll}}
                               : json{{"name", "cuda:0 Test GPU : cudaMallocAsync"}, {"type", "cuda"}, {"index", 0},
                                      {"vram_total", 17179869184ll}, {"vram_free", 16106127360ll},
                                      {"torch_vram_total", 0}, {"torch_vram_free", 0}};
        reply(res, 200, {{"system", {{"os", "posix"}, {"ram_total", 68719476736ll}, {"ram_free", 34359738368ll},
                                     {"comfyui_version", "0.3.64-test"}, {"python_version", "3.11"},
                                     {"embedded_python", false}, {"argv", {"main.py"}}}},
                         {"devices", {device}}});
      });
      s.Get(p + "/object_info", [this](const httplib::Request&, httplib::Response& res) {
        json out = json::object();
        for (auto& [name, c] : classes_) {
          json in = {{"required", json::object()}};
          for (auto& [k, kind] : c.inputs)
            in[c.optional.count(k) ? "optional" : "required"][k] =
              json::array({kind == 'i' ? "INT" : kind == 'f' ? "FLOAT" : kind == 's' ? "STRING" : "*"});
          out[name] = {{"input", in}, {"output_node", c.output}, {"name", name}};
        }
        reply(res, 200, out);
      });
      s.Get(p + "/view", [this](const httplib::Request& req, httplib::Response& res) {
        // server.py's view_image: 400 for a bad name or type, 403 for a subfolder outside
        // the directory, 404 for no file (and for no filename at all).
        if (!req.has_param("filename")) {
          res.status = 404;
          return;
        }
        std::string f = req.get_param_value("filename"),
                    type = req.has_param("type") ? req.get_param_value("type") : "output";
        if (f.empty() || f[0] == '/' || f.find("..") != std::string::npos ||
            (type != "output" && type != "input" && type != "temp")) {
          res.status = 400;
          return;
        }
        namespace fs = std::filesystem;
        fs::path dir = fs::path(root_ + "/" + type).lexically_normal();
        if (req.has_param("subfolder")) {
          std::string sub = req.get_param_value("subfolder");
          fs::path full = (!sub.empty() && sub[0] == '/' ? fs::path(sub) : dir / sub).lexically_normal();
          fs::path rel = full.lexically_relative(dir);
          if (rel.empty() || *rel.begin() == "..") {
            res.status = 403;
            return;
          }
          dir = full;
        }
        fs::path file = dir / fs::path(f).filename();
        std::ifstream in(file, std::ios::binary);
        if (!fs::is_regular_file(file) || !in) {
          res.status = 404;
          return;
        }
        std::ostringstream ss;
        ss << in.rdbuf();
        res.set_content(ss.str(), "application/octet-stream");
      });
      s.Post(p + "/upload/image", [this](const httplib::Request& req, httplib::Response& res) {
        if (!req.has_file("image")) {
          res.status = 400;
          return;
        }
        auto file = req.get_file_value("image");
        std::string sub = req.has_file("subfolder") ? req.get_file_value("subfolder").content : "";
        std::string type = req.has_file("type") ? req.get_file_value("type").content : "input";
        bool overwrite = req.has_file("overwrite") && req.get_file_value("overwrite").content == "true";
        if (!safe(sub) || !safe(file.filename) || file.filename.find('/') != std::string::npos ||
            (type != "input" && type != "temp" && type != "output")) {
          res.status = 400;
          return;
        }
        std::string dir = root_ + "/" + type + (sub.empty() ? "" : "/" + sub);
        std::filesystem::create_directories(dir);
        std::string name = file.filename;
        if (!overwrite)
          for (int i = 1; std::filesystem::exists(dir + "/" + name); ++i) {
            auto dot = file.filename.rfind('.');
            name = file.filename.substr(0, dot) + " (" + std::to_string(i) + ")" +
                   (dot == std::string::npos ? "" : file.filename.substr(dot));
          }
        std::ofstream(dir + "/" + name, std::ios::binary) << file.content;
        reply(res, 200, {{"name", name}, {"subfolder", sub}, {"type", type}});
      });
    }
  }

  static bool python_truthy(const json& v) {
    if (v.is_boolean())
      return v.get<bool>();
    if (v.is_number())
      return v.get<double>() != 0;
    if (v.is_string() || v.is_array() || v.is_object())
      return !v.empty() && !(v.is_string() && v.get<std::string>().empty());
    return false;
  }

  /// server.py's post_prompt: the number is taken (and spent) before the prompt is looked
  /// at; any prompt_id is taken as given.
  void post_prompt(const httplib::Request& req, httplib::Response& res) {
    json b = json::parse(req.body, nullptr, false);
    if (b.is_discarded()) {  // request.json() raises: aiohttp answers 500
      res.status = 500;
      return;
    }
    std::lock_guard<std::mutex> l(m_);
    json number;
    if (b.is_object() && b.contains("number")) {
      std::string why;
      auto n = python_float(b["number"], why);
      if (!n) {
        res.status = 500;
        return;
      }
      number = *n;
    } else {
      number = next_number_;
      if (b.is_object() && b.contains("front") && python_truthy(b["front"]))
        number = -next_number_;
      ++next_number_;
    }
    if (!b.is_object() || !b.contains("prompt")) {
      reply(res, 400, rejection("no_prompt", "No prompt provided", json::object(), "No prompt provided"));
      return;
    }
    std::string id = b.contains("prompt_id") ? python_str(b["prompt_id"]) : uuid4();
    json workflow = b["prompt"];
    validation v = validate(workflow);
    if (v.status != 200) {
      if (v.body.is_null())
        res.status = v.status;
      else
        reply(res, v.status, v.body);
      return;
    }
    ++submissions_;
    submitted_ids_.push_back(id);
    workflows_[id] = workflow;
    queued q{number, number.get<double>(), id, workflow, v.outputs};
    // heapq on (number, prompt_id, ...): the lowest number runs first.
    auto at = queue_.begin();
    while (at != queue_.end() && std::tie(at->order, at->id) <= std::tie(q.order, q.id))
      ++at;
    queue_.insert(at, q);
    cv_.notify_all();
    reply(res, 200, {{"prompt_id", id}, {"number", number}, {"node_errors", v.node_errors}});
  }

  void listen() {
    auto s = std::make_unique<httplib::Server>();
    routes(*s);
    if (port_ == 0) {
      port_ = s->bind_to_any_port("127.0.0.1");
    } else {
      for (int i = 0; i < 200 && !s->bind_to_port("127.0.0.1", port_); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (port_ <= 0 || !s->is_valid())
      throw std::runtime_error("test comfyui server cannot bind");
    server_ = std::move(s);
    listener_ = std::thread([srv = server_.get()] { srv->listen_after_bind(); });
    while (!server_->is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  void unlisten() {
    if (!server_)
      return;
    server_->stop();
    listener_.join();
    server_.reset();
  }

  std::string root_;
  int port_ = 0;
  std::map<std::string, node_class> classes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::thread worker_;

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<queued> queue_;
  std::map<std::string, json> history_;
  std::map<std::string, json> workflows_;
  std::map<std::string, int> executions_;
  std::vector<std::string> submitted_ids_;
  std::string running_;
  json running_item_;  ///< the running prompt as /queue lists it
  bool interrupt_ = false;
  bool quit_ = false;
  uint64_t generation_ = 0;
  int next_number_ = 0;  // PromptServer.number
  std::mt19937_64 rng_{std::random_device{}()};
  std::atomic<int> submissions_{0};
  std::atomic<int> interrupts_{0};
  std::atomic<int> origin_refusals_{0};
};

} // namespace testing_support
