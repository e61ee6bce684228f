#pragma once
// A ComfyUI stand-in for tests, in-process, over real HTTP (cpp-httplib): the API as
// ../shared/notes/comfyui-api.md describes it, errors included.
//
// What it reproduces: POST /prompt (prompt_id must be a lowercase canonical UUID; 400
// with error + node_errors for unknown node classes, no output node, inputs of the wrong
// type, missing input files); one prompt runs at a time; GET /history/{id} is {} until the
// prompt has ended; GET/POST /queue; POST /interrupt (optionally for one prompt_id);
// GET /view (400 on "..", 404 when missing); POST /upload/image (multipart, overwrite);
// GET /system_stats, /object_info; every route also under /api; 403 when a request
// carries an Origin header. Faults: `restart()` loses queue and history and refuses
// connections for a while; `response_delay_s` makes every answer slow; `fail_with` makes
// a prompt end in execution_error; `hold` keeps the running prompt running.
//
// Node classes do no ML: each node's value is a JSON description of its inputs, so files
// are deterministic functions of the workflow. SaveLatent writes
// <output>/<prefix>_NNNNN_.latent ("FAKE-LATENT\n" + the JSON of its samples); LoadLatent
// and LoadImage read input files (their value names the file's SHA-256); SaveVideo writes
// <output>/<prefix>_NNNNN_.mp4 holding the JSON of its video input.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
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
  /// '*' anything. Output nodes are listed separately.
  struct node_class {
    std::map<std::string, char> inputs;
    bool output = false;
  };

  /// The classes of the example workflows and of the tests' own.
  static std::map<std::string, node_class> default_classes() {
    return {
      {"CheckpointLoaderSimple", {{{"ckpt_name", 's'}}, false}},
      {"CLIPTextEncode", {{{"text", 's'}, {"clip", 'l'}}, false}},
      {"EmptyLTXVLatentVideo", {{{"width", 'i'}, {"height", 'i'}, {"length", 'i'}, {"batch_size", 'i'}}, false}},
      {"LTXVEmptyLatentAudio", {{{"frames_number", 'i'}, {"frame_rate", 'i'}, {"batch_size", 'i'}}, false}},
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
    int number = 0;
    std::string id;
    json workflow;
  };

  static bool canonical_uuid(const std::string& s) {
    if (s.size() != 36)
      return false;
    for (std::size_t i = 0; i < 36; ++i) {
      bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
        return false;
    }
    return true;
  }

  static double now_ms() {
    using namespace std::chrono;
    return static_cast<double>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
  }

  static void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }

  static json rejection(const std::string& type, const std::string& message, json node_errors = json::object()) {
    return {{"error", {{"type", type}, {"message", message}, {"details", ""}, {"extra_info", json::object()}}},
            {"node_errors", node_errors}};
  }

  bool safe(const std::string& p) const {
    return p.find("..") == std::string::npos && (p.empty() || p[0] != '/');
  }

  /// 400 body when the workflow is not valid, else null.
  json validate(const json& w) {
    if (!w.is_object() || w.empty())
      return rejection("no_prompt", "No prompt provided");
    bool any_output = false;
    json node_errors = json::object();
    for (auto& [id, node] : w.items()) {
      if (!node.is_object() || !node.contains("class_type") || !node["class_type"].is_string())
        return rejection("invalid_prompt", "Cannot execute because a node is missing the class_type property.");
      std::string cls = node["class_type"];
      auto it = classes_.find(cls);
      if (it == classes_.end())
        return rejection("missing_node_type", "Node '" + cls + "' not found. The custom node may not be installed.");
      any_output = any_output || it->second.output;
      const json inputs = node.value("inputs", json::object());
      json errors = json::array();
      for (auto& [name, kind] : it->second.inputs) {
        if (!inputs.contains(name)) {
          if (name == "audio" || name == "denoise")  // optional inputs
            continue;
          errors.push_back({{"type", "required_input_missing"}, {"message", "Required input is missing"}, {"details", name}});
          continue;
        }
        const json& v = inputs[name];
        bool link = v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer();
        bool ok = kind == '*' || (kind == 'l' && link) || (kind == 'i' && v.is_number_integer()) ||
                  (kind == 'f' && v.is_number()) || (kind == 's' && v.is_string()) || (kind != 'l' && link);
        if (link && !w.contains(v[0].get<std::string>()))
          ok = false;
        if (!ok)
          errors.push_back({{"type", "invalid_input_type"},
                            {"message", "Failed to convert an input value to a " + std::string(1, kind) + " value"},
                            {"details", name + ", " + v.dump()}});
      }
      for (const char* file_input : {"latent", "image"})
        if ((cls == "LoadLatent" || cls == "LoadImage") && inputs.contains(file_input) && inputs[file_input].is_string()) {
          std::string f = inputs[file_input];
          if (!safe(f) || !std::filesystem::is_regular_file(root_ + "/input/" + f))
            errors.push_back({{"type", "custom_validation_failed"}, {"message", "Invalid file"}, {"details", f}});
        }
      if (!errors.empty())
        node_errors[id] = {{"errors", errors}, {"dependent_outputs", json::array()}, {"class_type", cls}};
    }
    if (!any_output)
      return rejection("prompt_no_outputs", "Prompt has no outputs");
    if (!node_errors.empty())
      return rejection("prompt_outputs_failed_validation", "Prompt outputs failed validation", node_errors);
    return json();
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

  /// Runs a workflow: the value of every node, outputs of output nodes; throws on a node
  /// that cannot run.
  json execute(const json& w) {
    std::map<std::string, json> value;
    json outputs = json::object();
    std::function<json(const std::string&)> eval = [&](const std::string& id) -> json {
      if (value.count(id))
        return value[id];
      const json& node = w[id];
      std::string cls = node["class_type"];
      json in = json::object();
      const json given = node.value("inputs", json::object());
      for (auto& [k, v] : given.items())
        in[k] = (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer())
                  ? json{{"from", eval(v[0].get<std::string>())}, {"output", v[1]}}
                  : v;
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
    for (auto& [id, node] : w.items())
      if (classes_[node["class_type"].get<std::string>()].output)
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
            outputs = execute(q.workflow);
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
      history_[q.id] = {{"prompt", {q.number, q.id, q.workflow, json::object(), json::array()}},
                        {"outputs", outputs},
                        {"status", {{"status_str", status}, {"completed", status == "success"}, {"messages", messages}}},
                        {"meta", json::object()}};
    }
  }

  void routes(httplib::Server& s) {
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      double d = response_delay_s.load();
      if (d > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(d));
      if (req.has_header("Origin")) {
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
          running.push_back({0, running_, json::object(), json::object(), json::array()});
        for (auto& q : queue_)
          pending.push_back({q.number, q.id, q.workflow, json::object(), json::array()});
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
      s.Get(p + "/system_stats", [](const httplib::Request&, httplib::Response& res) {
        reply(res, 200, {{"system", {{"os", "posix"}, {"ram_total", 68719476736ll}, {"ram_free", 34359738368ll},
                                     {"comfyui_version", "0.3.64-test"}, {"python_version", "3.11"}}},
                         {"devices", {{{"name", "cuda:0 Test GPU"}, {"type", "cuda"}, {"index", 0},
                                       {"vram_total", 17179869184ll}, {"vram_free", 16106127360ll}}}}});
      });
      s.Get(p + "/object_info", [this](const httplib::Request&, httplib::Response& res) {
        json out = json::object();
        for (auto& [name, c] : classes_) {
          json req = json::object();
          for (auto& [k, kind] : c.inputs)
            req[k] = json::array({kind == 'i' ? "INT" : kind == 'f' ? "FLOAT" : kind == 's' ? "STRING" : "*"});
          out[name] = {{"input", {{"required", req}}}, {"output_node", c.output}, {"name", name}};
        }
        reply(res, 200, out);
      });
      s.Get(p + "/view", [this](const httplib::Request& req, httplib::Response& res) {
        std::string f = req.get_param_value("filename"), sub = req.get_param_value("subfolder"),
                    type = req.has_param("type") ? req.get_param_value("type") : "output";
        if (f.find("..") != std::string::npos || sub.find("..") != std::string::npos || f.empty()) {
          res.status = 400;
          return;
        }
        if (type != "output" && type != "input" && type != "temp") {
          res.status = 400;
          return;
        }
        std::string path = root_ + "/" + type + "/" + (sub.empty() ? "" : sub + "/") + f;
        std::ifstream in(path, std::ios::binary);
        if (!in) {
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

  void post_prompt(const httplib::Request& req, httplib::Response& res) {
    json b = json::parse(req.body, nullptr, false);
    if (!b.is_object() || !b.contains("prompt")) {
      reply(res, 400, rejection("no_prompt", "No prompt provided"));
      return;
    }
    std::string id = b.value("prompt_id", "");
    if (!canonical_uuid(id)) {
      reply(res, 400, rejection("invalid_prompt_id", "prompt_id must be a lowercase canonical UUID"));
      return;
    }
    std::lock_guard<std::mutex> l(m_);
    json bad = validate(b["prompt"]);
    if (!bad.is_null()) {
      reply(res, 400, bad);
      return;
    }
    ++submissions_;
    submitted_ids_.push_back(id);
    workflows_[id] = b["prompt"];
    int number = next_number_++;
    queue_.push_back({number, id, b["prompt"]});
    cv_.notify_all();
    reply(res, 200, {{"prompt_id", id}, {"number", number}, {"node_errors", json::object()}});
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
  bool interrupt_ = false;
  bool quit_ = false;
  uint64_t generation_ = 0;
  int next_number_ = 1;
  std::atomic<int> submissions_{0};
  std::atomic<int> interrupts_{0};
  std::atomic<int> origin_refusals_{0};
};

} // namespace testing_support
