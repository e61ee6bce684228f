#include "nodes/http_server.hpp"
#include "nodes/verbs/shot_graph_fields.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "actors/planner/gantt.hpp"
#include "common/files.hpp"
#include "common/metrics.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/line_text.hpp"
#include "nodes/exit_codes.hpp"
#include "nodes/http_events.hpp"
#include "nodes/http_video.hpp"
#include "nodes/inputs.hpp"
#include "vidline/dashboard_files.hpp"
#include "vidline/version.hpp"
#include "config/workflows.hpp"

namespace vidline::nodes {

using nlohmann::json;

// -- pure helpers ------------------------------------------------------------------------------

namespace {

std::string type_of(const json& j) {
  switch (j.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "a boolean";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "an integer";
  case json::value_t::number_float:
    return "a number with a fraction";
  case json::value_t::string:
    return "a string";
  case json::value_t::array:
    return "an array";
  case json::value_t::object:
    return "an object";
  default:
    return "something else";
  }
}

/// An unsigned integer field within [lo, hi].
/// `where`: what holds the field, for the message ("" = the body; "shots[2]." = a shot).
bool read_uint(const json& o, const char* key, uint64_t lo, uint64_t hi, uint64_t& out,
               api_error& err, const std::string& where = "") {
  const json& v = o.at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    err = {400, "field '" + where + key + "' must be a whole number from " +
                    std::to_string(lo) + " to " + std::to_string(hi) + ", got " + type_of(v) +
                    (v.is_number_integer() ? " below 0" : "")};
    return false;
  }
  const uint64_t x = v.get<uint64_t>();
  if (x < lo || x > hi) {
    err = {400, "field '" + where + key + "' must be from " + std::to_string(lo) + " to " +
                    std::to_string(hi) + ", got " + std::to_string(x)};
    return false;
  }
  out = x;
  return true;
}

bool read_text(const json& o, const char* key, std::string& out, api_error& err,
               const std::string& where = "") {
  const json& v = o.at(key);
  if (!v.is_string()) {
    err = {400, "field '" + where + key + "' must be a string, got " + type_of(v)};
    return false;
  }
  out = v.get<std::string>();
  return true;
}

/// An input's digest (`reference_sha256`): absent or null leaves `out` empty.
bool read_digest(const json& o, const char* key, std::string& out, api_error& err,
                 const std::string& where = "") {
  if (!o.contains(key) || o.at(key).is_null())
    return true;
  if (!read_text(o, key, out, err, where))
    return false;
  if (!is_sha256_hex(out)) {
    err = {400, "field '" + where + key + "' must be 64 lowercase hex digits (an input "
                "uploaded with PUT /v1/inputs/{sha256})"};
    return false;
  }
  return true;
}

} // namespace

namespace {

/// A signed integer field within [lo, hi].
bool read_int(const json& o, const char* key, int64_t lo, int64_t hi, int64_t& out,
              api_error& err, const std::string& where = "") {
  const json& v = o.at(key);
  const std::string range = " from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!v.is_number_integer()) {
    err = {400, "field '" + where + key + "' must be a whole number" + range + ", got " +
                    type_of(v)};
    return false;
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) {
    err = {400, "field '" + where + key + "' must be" + range + ", got " + v.dump()};
    return false;
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    err = {400, "field '" + where + key + "' must be" + range + ", got " + std::to_string(x)};
    return false;
  }
  out = x;
  return true;
}

/// An object's fields all known and the required ones given (`where` as for read_uint).
bool check_fields(const json& doc, const std::vector<std::string>& required,
                  const std::vector<std::string>& optional, api_error& err,
                  const std::string& where = "") {
  for (auto& [key, value] : doc.items())
    if (std::find(required.begin(), required.end(), key) == required.end() &&
        std::find(optional.begin(), optional.end(), key) == optional.end()) {
      std::string known;
      for (auto* list : {&required, &optional})
        for (auto& k : *list)
          known += (known.empty() ? "" : ", ") + k;
      err = {400, "unknown field '" + where + text::to_valid_utf8(key) + "' (known: " + known + ")"};
      return false;
    }
  for (auto& k : required)
    if (!doc.contains(k)) {
      err = {400, "missing field '" + where + k + "'"};
      return false;
    }
  return true;
}

/// The body as a JSON object whose fields are all known and the required ones given.
std::optional<json> read_body(const std::string& body, const std::vector<std::string>& required,
                              const std::vector<std::string>& optional, api_error& err) {
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::parse_error& e) {
    err = {400, std::string("the body is not JSON: ") + e.what()};
    return std::nullopt;
  }
  if (!doc.is_object()) {
    err = {400, "the body must be a JSON object, got " + type_of(doc)};
    return std::nullopt;
  }
  if (!check_fields(doc, required, optional, err))
    return std::nullopt;
  return doc;
}

/// A shot's params and inputs (each input {"sha256": ...} of an uploaded one): "" or
/// "NAME': what is wrong" (the field's name completes the caller's message).
std::string read_shot_model(const json& j, msg::shot& s) {
  if (j.contains("params"))
    if (auto why = config::params_from_json(j["params"], s.params); !why.empty())
      return why.substr(0, why.find(": ")) + "': " + why.substr(why.find(": ") + 2);
  if (!j.contains("inputs"))
    return "";
  if (!j["inputs"].is_object())
    return "inputs': must be an object of named inputs ({\"first_frame\": {\"sha256\": ...}})";
  for (auto& [name, v] : j["inputs"].items()) {
    msg::job_input in;
    if (auto why = config::input_from_json(name, v, false, in); !why.empty())
      return "inputs." + text::to_valid_utf8(name) + "': " + why;
    s.inputs.push_back(std::move(in));
  }
  return "";
}

/// One shot of a shot list (`vidline run --jobs FILE`, docs/shots.md): the fields of a shot
/// line, the prompt given as text (`prompt_file` is the CLI's: a file beside the list).
bool read_shot(const json& j, const std::string& where, msg::shot& s, api_error& err) {
  if (!j.is_object()) {
    err = {400, "field '" + where.substr(0, where.size() - 1) + "' must be a JSON object, got " +
                    type_of(j)};
    return false;
  }
  if (!check_fields(j, {"prompt", "width", "height", "seconds", "seed"},
                    {"takes", "name", "priority", "reference", "reference_sha256",
                     "negative_prompt", "workflow", "params", "inputs", "sequence"}, err, where))
    return false;
  if ((j.contains("negative_prompt") && !read_text(j, "negative_prompt", s.negative_prompt, err, where)) ||
      (j.contains("workflow") && !read_text(j, "workflow", s.workflow, err, where)))
    return false;
  if (auto why = read_shot_model(j, s); !why.empty()) {
    err = {400, "field '" + where + why};
    return false;
  }
  // Shots that follow shots: the sequence this shot is a part of.
  if (auto why = nodes::read_graph_fields(j, s); !why.empty()) {
    err = {400, "field '" + where + why.substr(0, why.find(':')) + "'" + why.substr(why.find(':'))};
    return false;
  }
  uint64_t w = 0, h = 0, sec = 0, takes = 1;
  if (!read_text(j, "prompt", s.prompt, err, where) ||
      !read_uint(j, "width", 8, 8192, w, err, where) ||
      !read_uint(j, "height", 8, 8192, h, err, where) ||
      !read_uint(j, "seconds", 1, 3600, sec, err, where) ||
      !read_uint(j, "seed", 0, UINT64_MAX, s.seed, err, where) ||
      (j.contains("takes") && !read_uint(j, "takes", 1, 1000, takes, err, where)) ||
      (j.contains("name") && !read_text(j, "name", s.name, err, where)) ||
      (j.contains("reference") && !read_text(j, "reference", s.reference, err, where)) ||
      !read_digest(j, "reference_sha256", s.reference_sha256, err, where))
    return false;
  s.width = static_cast<uint32_t>(w);
  s.height = static_cast<uint32_t>(h);
  s.seconds = static_cast<uint32_t>(sec);
  s.takes = static_cast<uint32_t>(takes);
  if (j.contains("priority")) {
    int64_t p = 0;
    if (!read_int(j, "priority", INT32_MIN, INT32_MAX, p, err, where))
      return false;
    s.priority = static_cast<int32_t>(p);
  }
  return true;
}

/// The batch fields `vidline run` and `vidline submit` share: prompt, width, height,
/// seconds, count, seed, and the optional reference and request_id.
template <class Request>
bool read_batch(const json& doc, Request& r, api_error& err) {
  uint64_t w = 0, h = 0, s = 0, n = 0;
  if (!read_text(doc, "prompt", r.prompt, err) || !read_uint(doc, "width", 8, 8192, w, err) ||
      !read_uint(doc, "height", 8, 8192, h, err) || !read_uint(doc, "seconds", 1, 3600, s, err) ||
      !read_uint(doc, "count", 1, 1000000, n, err) ||
      !read_uint(doc, "seed", 0, UINT64_MAX, r.seed, err))
    return false;
  r.width = static_cast<uint32_t>(w);
  r.height = static_cast<uint32_t>(h);
  r.seconds = static_cast<uint32_t>(s);
  r.count = static_cast<uint32_t>(n);
  if (doc.contains("reference") && !doc["reference"].is_null() &&
      !read_text(doc, "reference", r.reference, err))
    return false;
  if (doc.contains("request_id") && !read_text(doc, "request_id", r.request_id, err))
    return false;
  if (r.seed > UINT64_MAX - (r.count - 1)) {
    err = {400, "field 'seed': " + std::to_string(r.seed) + " with count " +
                    std::to_string(r.count) + " would give the last job a seed past 2^64-1"};
    return false;
  }
  return true;
}

} // namespace

std::optional<msg::submit_run> parse_submit(const std::string& body, api_error& err) {
  static const std::vector<std::string> uniform{"prompt", "width", "height", "seconds",
                                                "count", "seed"};
  auto doc = read_body(body, {"mode"},
                       {"prompt", "width", "height", "seconds", "count", "seed", "shots",
                        "reference", "reference_sha256", "request_id", "priority", "rerender"},
                       err);
  if (!doc)
    return std::nullopt;
  msg::submit_run r;
  if (!read_text(*doc, "mode", r.mode, err))
    return std::nullopt;
  if (doc->contains("shots")) {
    // A shot list: each shot has its own prompt, size and seed.
    for (auto& k : uniform)
      if (doc->contains(k)) {
        err = {400, "field '" + k + "': a shot list ('shots') comes without prompt, width, "
                                    "height, seconds, count and seed (each shot has its own)"};
        return std::nullopt;
      }
    const json& shots = (*doc)["shots"];
    if (!shots.is_array() || shots.empty()) {
      err = {400, "field 'shots' must be a non-empty array of shots, got " +
                      (shots.is_array() ? std::string("an empty array") : type_of(shots))};
      return std::nullopt;
    }
    for (std::size_t i = 0; i < shots.size(); ++i) {
      msg::shot s;
      if (!read_shot(shots[i], "shots[" + std::to_string(i) + "].", s, err))
        return std::nullopt;
      r.shots.push_back(std::move(s));
    }
    if (doc->contains("reference") && !(*doc)["reference"].is_null() &&
        !read_text(*doc, "reference", r.reference, err))
      return std::nullopt;
    if (doc->contains("request_id") && !read_text(*doc, "request_id", r.request_id, err))
      return std::nullopt;
  } else {
    if (!check_fields(*doc, uniform,
                      {"mode", "reference", "reference_sha256", "request_id", "priority", "rerender"},
                      err) ||
        !read_batch(*doc, r, err))
      return std::nullopt;
  }
  if (!read_digest(*doc, "reference_sha256", r.reference_sha256, err))
    return std::nullopt;
  if (doc->contains("priority")) {
    int64_t p = 0;
    if (!read_int(*doc, "priority", -api_max_priority, api_max_priority, p, err))
      return std::nullopt;
    r.priority = static_cast<int32_t>(p);
  }
  if (doc->contains("rerender")) {
    if (!(*doc)["rerender"].is_boolean()) {
      err = {400, "field 'rerender' must be true or false, got " + type_of((*doc)["rerender"])};
      return std::nullopt;
    }
    r.rerender = (*doc)["rerender"].get<bool>();
  }
  return r;
}

std::optional<msg::submit_jobs> parse_add_jobs(const std::string& run_id, const std::string& body,
                                               api_error& err) {
  static const std::vector<std::string> batch{"prompt", "width", "height", "seconds", "count",
                                              "seed"};
  auto doc = read_body(body, {},
                       {"prompt", "width", "height", "seconds", "count", "seed", "shots",
                        "reference", "reference_sha256", "request_id"}, err);
  if (!doc)
    return std::nullopt;
  msg::submit_jobs r;
  r.run_id = run_id;
  if (doc->contains("shots")) {
    // The shot form, as POST /v1/runs takes it (names included).
    for (auto& k : batch)
      if (doc->contains(k)) {
        err = {400, "field '" + k + "': shots ('shots') come without prompt, width, height, "
                                    "seconds, count and seed (each shot has its own)"};
        return std::nullopt;
      }
    const json& shots = (*doc)["shots"];
    if (!shots.is_array() || shots.empty()) {
      err = {400, "field 'shots' must be a non-empty array of shots, got " +
                      (shots.is_array() ? std::string("an empty array") : type_of(shots))};
      return std::nullopt;
    }
    for (std::size_t i = 0; i < shots.size(); ++i) {
      msg::shot s;
      if (!read_shot(shots[i], "shots[" + std::to_string(i) + "].", s, err))
        return std::nullopt;
      r.shots.push_back(std::move(s));
    }
    if (doc->contains("request_id") && !read_text(*doc, "request_id", r.request_id, err))
      return std::nullopt;
    if (doc->contains("reference") || doc->contains("reference_sha256")) {
      err = {400, "field 'reference': with 'shots', each shot names its own reference"};
      return std::nullopt;
    }
    return r;
  }
  if (!check_fields(*doc, batch, {"reference", "reference_sha256", "request_id"}, err) ||
      !read_batch(*doc, r, err))
    return std::nullopt;
  if (!read_digest(*doc, "reference_sha256", r.reference_sha256, err))
    return std::nullopt;
  return r;
}

bool parse_empty_body(const std::string& body, const std::string& what, api_error& err) {
  if (body.empty())
    return true;
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::parse_error& e) {
    err = {400, std::string("the body is not JSON: ") + e.what()};
    return false;
  }
  if (doc.is_object() && doc.empty())
    return true;
  err = {400, doc.is_object() ? "unknown field '" + text::to_valid_utf8(doc.begin().key()) + "' (" +
                                  what + " takes no fields)"
                              : "the body must be an empty JSON object, got " + type_of(doc)};
  return false;
}

std::string read_token_file(const std::string& path) {
  std::string text;
  try {
    text = files::read_all(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("http token_file " + path + ": cannot read it (" + e.what() + ")");
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    throw std::runtime_error("http token_file " + path + " holds no token");
  const auto last = text.find_last_not_of(" \t\r\n");
  text = text.substr(first, last - first + 1);
  if (text.find_first_of(" \t\r\n") != std::string::npos)
    throw std::runtime_error("http token_file " + path +
                             " holds more than one word; the token is one line without spaces");
  return text;
}

// -- the server ------------------------------------------------------------------------------

namespace {

/// Compares without stopping at the first difference (a token must not leak by timing).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

const char* code_name(int status) {
  switch (status) {
  case 400:
    return "bad_request";
  case 401:
    return "unauthorized";
  case 403:
    return "forbidden";
  case 404:
    return "not_found";
  case 409:
    return "conflict";
  case 413:
    return "too_large";
  case 415:
    return "unsupported_media_type";
  case 422:
    return "refused";
  case 501:
    return "not_implemented";
  case 502:
    return "bad_gateway";
  case 503:
    return "unavailable";
  default:
    return status >= 500 ? "internal" : "error";
  }
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", text::to_valid_utf8(message)}, {"code", code_name(status)}});
}

/// The HTTP status a coordinator_error means.
int status_of(const coordinator_error& e) {
  switch (e.exit_code()) {
  case exit_code::no_such_run:
    return 404;
  case exit_code::unreachable:
    return 503;
  case exit_code::usage:
    return 400;
  case exit_code::too_large:
    return 500;
  default:
    return 422;
  }
}

std::string random_request_id() {
  std::random_device rd;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "http-%08x%08x%08x", rd(), rd(), rd());
  return buf;
}

/// Why a reference given as a path (no digest) cannot be used, naming `what` (the shot), or
/// "": the path must be a file on the coordinator's host, which reads it (docs/http.md).
std::string reference_problem(const std::string& path, const std::string& digest,
                              const std::string& what, const std::string& host) {
  if (path.empty() || !digest.empty())
    return "";
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec))
    return "";
  return what + ": reference '" + path + "' is not a file on the coordinator's host (" + host +
         "); give a path that exists there, or upload the image (PUT /v1/inputs/{sha256}) and "
         "give its reference_sha256";
}

bool is_dashboard_path(const std::string& p) {
  return p == "/" || p == "/dashboard" || p.rfind("/dashboard/", 0) == 0;
}

} // namespace

struct http_server::impl {
  std::shared_ptr<const config::cluster> cluster;
  const config::host* self = nullptr;
  bool coordinator = false;
  std::string token;
  httplib::Server svr;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::mutex m;
  std::condition_variable cv;
  std::atomic<int> streams{0};
  static constexpr int max_streams = 8;
  std::string bound;
  int collector = 0;
  std::mutex inputs_mutex;
  std::unique_ptr<input_store> inputs;  ///< PUT /v1/inputs: <data_dir>/inputs

  using handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  /// One API request: its method, its path pattern (a regex; captures are the path's
  /// parameters), whether only the coordinator's node serves it, and its handler. A new
  /// request of the API is one more row (and its entry in docs/openapi.json).
  struct route {
    std::string method;
    std::string pattern;
    bool coordinator_only;
    handler fn;
  };

  coordinator_client client() const { return coordinator_client(*cluster); }

  /// Waits up to `d` or until the server stops; whether it is stopping.
  bool pause(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> l(m);
    return cv.wait_for(l, d, [this] { return stopping.load(); });
  }

  std::vector<route> routes();
  void install();

  // Handlers.
  void metrics(const httplib::Request&, httplib::Response& res);
  void submit(const httplib::Request& req, httplib::Response& res);
  void list_runs(const httplib::Request& req, httplib::Response& res);
  void cancel(const httplib::Request& req, httplib::Response& res, bool one_job);
  void add_jobs(const httplib::Request& req, httplib::Response& res);
  void run_status(const httplib::Request& req, httplib::Response& res);
  void resume(const httplib::Request& req, httplib::Response& res);
  void gantt(const httplib::Request& req, httplib::Response& res);
  void cluster_status(const httplib::Request&, httplib::Response& res);
  void gpus(const httplib::Request&, httplib::Response& res);
  void video(const httplib::Request& req, httplib::Response& res);
  void events(const httplib::Request& req, httplib::Response& res, bool follow_latest);
  void dashboard(const httplib::Request& req, httplib::Response& res);
  void put_input(const httplib::Request& req, httplib::Response& res);

  /// A run's status or an error answer; nullopt when answered with an error.
  std::optional<json> status_of_run(const std::string& run_id, httplib::Response& res);
};

std::vector<http_server::impl::route> http_server::impl::routes() {
  using namespace std::placeholders;
  const std::string run = "/v1/runs/([A-Za-z0-9._-]+)";
  return {
    {"GET", "/metrics", false, [this](auto& q, auto& s) { metrics(q, s); }},
    {"POST", "/v1/runs", true, [this](auto& q, auto& s) { submit(q, s); }},
    {"GET", "/v1/runs", true, [this](auto& q, auto& s) { list_runs(q, s); }},
    {"GET", run, true, [this](auto& q, auto& s) { run_status(q, s); }},
    {"POST", run + "/resume", true, [this](auto& q, auto& s) { resume(q, s); }},
    {"POST", run + "/cancel", true, [this](auto& q, auto& s) { cancel(q, s, false); }},
    {"POST", run + "/jobs", true, [this](auto& q, auto& s) { add_jobs(q, s); }},
    {"POST", run + "/jobs/([0-9]{1,9})/cancel", true, [this](auto& q, auto& s) { cancel(q, s, true); }},
    {"GET", run + "/gantt\\.svg", true, [this](auto& q, auto& s) { gantt(q, s); }},
    {"GET", run + "/events", true, [this](auto& q, auto& s) { events(q, s, false); }},
    {"GET", run + "/jobs/([0-9]{1,9})/video", false, [this](auto& q, auto& s) { video(q, s); }},
    {"PUT", "/v1/inputs/([^/]*)", true, [this](auto& q, auto& s) { put_input(q, s); }},
    {"GET", "/v1/cluster", true, [this](auto& q, auto& s) { cluster_status(q, s); }},
    {"GET", "/v1/gpus", true, [this](auto& q, auto& s) { gpus(q, s); }},
    {"GET", "/v1/events", true, [this](auto& q, auto& s) { events(q, s, true); }},
    {"GET", "/", true, [](auto&, auto& s) { s.set_redirect("/dashboard/"); }},
    {"GET", "/dashboard/?([A-Za-z0-9._-]*)", true, [this](auto& q, auto& s) { dashboard(q, s); }},
  };
}

void http_server::impl::install() {
  for (auto& r : routes()) {
    if (r.coordinator_only && !coordinator)
      continue;
    // Nothing a request does may take the node down: every handler answers, at worst 500.
    auto guarded = [fn = r.fn](const httplib::Request& q, httplib::Response& s) {
      try {
        fn(q, s);
      } catch (const coordinator_error& e) {
        send_error(s, status_of(e), e.what());
      } catch (const std::exception& e) {
        send_error(s, 500, std::string("internal error: ") + e.what());
      } catch (...) {
        send_error(s, 500, "internal error");
      }
    };
    if (r.method == "GET")
      svr.Get(r.pattern, guarded);
    else if (r.method == "PUT")
      svr.Put(r.pattern, guarded);
    else
      svr.Post(r.pattern, guarded);
  }
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& s, std::exception_ptr) {
    send_error(s, 500, "internal error");
  });
  svr.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& s) {
    // Browsers on another origin are not let in (no CORS): a request that says it comes
    // from a page of another origin is refused whatever it asks.
    if (q.has_header("Origin")) {
      const std::string origin = q.get_header_value("Origin");
      const std::string own = "http://" + q.get_header_value("Host");
      if (origin != own) {
        metrics::global().add("vidline_refused_connections_total", {{"channel", "http"}});
        send_error(s, 403, "requests from another origin (" + origin + ") are refused");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // The dashboard's files hold no data: the page asks for the token and sends it itself.
    if (!token.empty() && !is_dashboard_path(q.path)) {
      const std::string auth = q.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      // A <video> element sends no header: a video's GET may give the token as ?token=.
      static const std::regex video_path("/v1/runs/[A-Za-z0-9._-]+/jobs/[0-9]{1,9}/video");
      const bool video_token = q.method == "GET" && q.has_param("token") &&
                               std::regex_match(q.path, video_path) &&
                               same_secret(q.get_param_value("token"), token);
      if (!video_token &&
          (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), token))) {
        metrics::global().add("vidline_refused_connections_total", {{"channel", "http"}});
        s.set_header("WWW-Authenticate", "Bearer");
        send_error(s, 401, auth.empty() ? "an Authorization: Bearer token is required"
                                        : "the bearer token is wrong");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Routing comes before the body is read: its headers say whether there is one.
    const bool has_body = q.get_header_value("Content-Length").find_first_not_of("0") != std::string::npos ||
                          q.has_header("Transfer-Encoding");
    // The server reads bodies up to the larger input limit (PUT /v1/inputs); every other
    // request is held to http.max_request_bytes before its body is read.
    const std::string length = q.get_header_value("Content-Length");
    const bool input_put = q.method == "PUT" && q.path.rfind("/v1/inputs/", 0) == 0;
    if (!input_put && !length.empty() && length.size() < 20 &&
        std::strtoull(length.c_str(), nullptr, 10) > self->http.max_request_bytes) {
      send_error(s, 413, "the request is over the limit of this endpoint (http.max_request_bytes)");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (input_put && !length.empty() && length.size() < 20 &&
        std::strtoull(length.c_str(), nullptr, 10) > max_input_bytes) {
      send_error(s, 413, "the image is " + length + " bytes, over the limit of " +
                             std::to_string(max_input_bytes) + " bytes for an input");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (q.method == "POST" && has_body) {
      const std::string type = q.get_header_value("Content-Type");
      if (type.rfind("application/json", 0) != 0) {
        send_error(s, 415, "a request body must be JSON (Content-Type: application/json), got '" +
                               type + "'");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([](const httplib::Request& q, httplib::Response& s) {
    // Unmatched paths (404), bodies over the limit (413) and the like: a JSON answer that
    // says so, unless a handler wrote one already.
    if (!s.body.empty() || s.status < 400)
      return;
    if (s.status == 404)
      send_error(s, 404, "no such path: " + q.method + " " + q.path + " (docs/openapi.json)");
    else if (s.status == 413)
      send_error(s, 413, "the request is over the limit of this endpoint (http.max_request_bytes)");
    else
      send_error(s, s.status, "the request could not be served");
  });
  svr.set_post_routing_handler([](const httplib::Request&, httplib::Response& s) {
    s.set_header("Cache-Control", "no-store");
    s.set_header("X-Content-Type-Options", "nosniff");
  });
  svr.set_logger([](const httplib::Request&, const httplib::Response& s) {
    metrics::global().add("vidline_http_requests_total", {{"code", std::to_string(s.status)}});
  });
}

// -- handlers --------------------------------------------------------------------------------

void http_server::impl::metrics(const httplib::Request&, httplib::Response& res) {
  res.set_content(metrics::global().render(), "text/plain; version=0.0.4; charset=utf-8");
}

std::optional<json> http_server::impl::status_of_run(const std::string& run_id,
                                                     httplib::Response& res) {
  auto cl = client();
  auto st = cl.status(run_id == "latest" ? "" : run_id, 5000);
  if (!st) {
    send_error(res, 503, "no answer from the coordinator at " + cl.endpoint() + " within 5 s");
    return std::nullopt;
  }
  return st;
}

void http_server::impl::submit(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  auto r = parse_submit(req.body, err);
  if (!r) {
    send_error(res, err.status, err.message);
    return;
  }
  std::string why = reference_problem(r->reference, r->reference_sha256, "field 'reference'",
                                      self->name);
  for (std::size_t i = 0; i < r->shots.size() && why.empty(); ++i) {
    const auto& sh = r->shots[i];
    why = reference_problem(sh.reference, sh.reference_sha256,
                            "shots[" + std::to_string(i) + "]" +
                              (sh.name.empty() ? std::string() : " ('" + sh.name + "')"),
                            self->name);
  }
  if (!why.empty()) {
    send_error(res, 400, why);
    return;
  }
  if (r->request_id.empty())
    r->request_id = random_request_id();
  auto cl = client();
  auto id = cl.submit(*r);
  res.set_header("Location", "/v1/runs/" + id);
  // Hosts down now: the run waits for them; the answer says so.
  json down = json::array();
  try {
    if (auto view = cl.status("@cluster", 2000))
      down = hosts_down(*view, *cluster);
  } catch (const std::exception&) {
  }
  send_json(res, 201, {{"run_id", id}, {"request_id", r->request_id}, {"hosts_down", down}});
}

void http_server::impl::list_runs(const httplib::Request& req, httplib::Response& res) {
  // `vidline runs [--all]`: the coordinator's list, as it sends it.
  bool all = false;
  for (auto& [key, value] : req.params) {
    if (key != "all") {
      send_error(res, 400, "unknown query parameter '" + key + "' (known: all)");
      return;
    }
    if (value != "true" && value != "false" && value != "1" && value != "0") {
      send_error(res, 400, "query parameter 'all' must be true or false, got '" + value + "'");
      return;
    }
    all = value == "true" || value == "1";
  }
  json runs = client().runs(all);
  if (!runs.is_array())
    throw std::runtime_error("the coordinator's list of runs is not a JSON array");
  const json latest = runs.empty() ? json(nullptr) : runs.back()["run_id"];
  send_json(res, 200, {{"runs", std::move(runs)}, {"latest", latest}});
}

void http_server::impl::cancel(const httplib::Request& req, httplib::Response& res, bool one_job) {
  api_error err;
  if (!parse_empty_body(req.body, "cancel", err)) {
    send_error(res, err.status, err.message);
    return;
  }
  msg::cancel_run c;
  c.run_id = req.matches[1];
  if (one_job) {
    c.one_job = true;
    c.index = static_cast<uint32_t>(std::stoul(std::string(req.matches[2])));
  }
  auto cl = client();
  auto r = cl.cancel(c);
  if (r.cancelled == 0) {
    // Nothing was left to stop: the run (or the job) had finished. Said as a conflict, so a
    // program learns its cancel changed nothing.
    std::string what = "run " + r.run_id + " is " + r.state;
    if (one_job) {
      std::string job_state = "finished";
      try {
        if (auto st = cl.status_page(c.run_id, c.index, 1, 2000); st && !(*st)["jobs"].empty())
          job_state = (*st)["jobs"][0].value("state", job_state);
      } catch (const coordinator_error&) {
      }
      what = "job " + std::to_string(c.index) + " of run " + r.run_id + " is " + job_state;
    }
    send_error(res, 409, what + ": nothing left to cancel");
    return;
  }
  send_json(res, 200, {{"run_id", r.run_id}, {"cancelled", r.cancelled},
                       {"in_flight", r.in_flight}, {"state", r.state}});
}

void http_server::impl::add_jobs(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  auto r = parse_add_jobs(req.matches[1], req.body, err);
  if (!r) {
    send_error(res, err.status, err.message);
    return;
  }
  if (auto why = reference_problem(r->reference, r->reference_sha256, "field 'reference'",
                                   self->name);
      !why.empty()) {
    send_error(res, 400, why);
    return;
  }
  if (r->request_id.empty())
    r->request_id = random_request_id();
  auto a = client().submit_jobs(*r);
  send_json(res, 201, {{"run_id", a.run_id}, {"first_index", a.first_index},
                       {"count", a.count}, {"request_id", r->request_id}});
}

void http_server::impl::run_status(const httplib::Request& req, httplib::Response& res) {
  if (auto st = status_of_run(req.matches[1], res))
    send_json(res, 200, *st);
}

void http_server::impl::resume(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  if (!parse_empty_body(req.body, "resume", err)) {
    send_error(res, err.status, err.message);
    return;
  }
  auto r = client().resume(req.matches[1]);
  send_json(res, 200, {{"run_id", r.run_id}, {"reopened", r.reopened}, {"state", r.state}});
}

void http_server::impl::gantt(const httplib::Request& req, httplib::Response& res) {
  auto st = status_of_run(req.matches[1], res);
  if (!st)
    return;
  std::string svg;
  try {
    svg = planner::gantt_svg({run_gantt(*st)});
  } catch (const json::exception& e) {
    send_error(res, 502, std::string("the run's status has no stage times for a chart: ") + e.what());
    return;
  }
  res.set_content(svg, "image/svg+xml");
}

void http_server::impl::cluster_status(const httplib::Request&, httplib::Response& res) {
  if (auto st = status_of_run("@cluster", res))
    send_json(res, 200, *st);
}

// Every host's cards (`vidline gpus --json`), with the drains beside them.
void http_server::impl::gpus(const httplib::Request&, httplib::Response& res) {
  if (auto st = status_of_run("@cluster", res))
    send_json(res, 200, json{{"gpus", st->value("gpus", json::array())},
                             {"drains", st->value("drains", json::object())}});
}

void http_server::impl::video(const httplib::Request& req, httplib::Response& res) {
  const std::string run_id = req.matches[1];
  const auto index = std::stoul(std::string(req.matches[2]));
  auto st = status_of_run(run_id, res);
  if (!st)
    return;
  const json* job = nullptr;
  for (auto& j : (*st)["jobs"])
    if (j.value("index", uint64_t{0}) == index)
      job = &j;
  if (job == nullptr) {
    send_error(res, 404, "run " + run_id + " has no job " + std::to_string(index) + " (it has " +
                             std::to_string((*st)["jobs"].size()) + ")");
    return;
  }
  if ((*job)["state"] != "succeeded" || !(*job)["output"].is_string()) {
    send_error(res, 409, "job " + std::to_string(index) + " of run " + run_id + " is " +
                             (*job)["state"].get<std::string>() + ": its video is not made");
    return;
  }
  std::string why;
  int why_status = 404;
  const std::string path = local_video(*cluster, *self, run_id, *job, why, why_status);
  if (path.empty()) {
    send_error(res, why_status, why);
    return;
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  auto in = std::make_shared<std::ifstream>(path, std::ios::binary);
  if (ec || !*in) {
    send_error(res, 500, "cannot read the video of job " + std::to_string(index));
    return;
  }
  const bool mp4 = path.size() > 4 && path.compare(path.size() - 4, 4, ".mp4") == 0;
  const std::string name = std::filesystem::path((*job)["output"].get<std::string>()).filename().string();
  res.set_header("Content-Disposition", "inline; filename=\"" + name + "\"");
  res.set_header("Accept-Ranges", "bytes");
  if (!(*job)["output_sha256"].is_null())
    res.set_header("X-Vidline-Sha256", (*job)["output_sha256"].get<std::string>());
  // With its length known, httplib answers a Range request 206 with just those bytes.
  res.set_content_provider(
    static_cast<size_t>(size), mp4 ? "video/mp4" : "application/octet-stream",
    [in](size_t offset, size_t length, httplib::DataSink& sink) {
      std::vector<char> buf(std::min<size_t>(length, 1 << 20));
      in->seekg(static_cast<std::streamoff>(offset));
      in->read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto got = in->gcount();
      if (got <= 0)
        return false;
      return sink.write(buf.data(), static_cast<size_t>(got));
    });
}

void http_server::impl::events(const httplib::Request& req, httplib::Response& res,
                               bool follow_latest) {
  std::string run_id = follow_latest ? "" : std::string(req.matches[1]);
  if (!follow_latest) {
    // An unknown run is a 404 now, not an empty stream; "latest" is the run it is now.
    auto st = status_of_run(run_id, res);
    if (!st)
      return;
    run_id = (*st)["run_id"].get<std::string>();
  }
  if (streams.fetch_add(1) >= max_streams) {
    streams.fetch_sub(1);
    send_error(res, 503, "too many event streams open (" + std::to_string(max_streams) + ")");
    return;
  }
  struct stream {
    json last_run, last_cluster;
    std::vector<double> plan;
    uint64_t id = 0;
    bool ended = false;
    bool started = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  auto s = std::make_shared<stream>();
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
    "text/event-stream",
    [this, s, run_id, follow_latest](size_t, httplib::DataSink& sink) {
      if (stopping) {
        sink.done();
        return true;
      }
      std::string out;
      if (!s->started) {
        s->started = true;
        out += "retry: 2000\n\n";
      }
      auto emit = [&](const events::event& e) { out += events::sse_text(e, ++s->id); };
      auto cl = client();
      try {
        if (follow_latest)
          if (auto c = cl.status("@cluster", 2000)) {
            auto view = [](json j) {
              for (auto& [name, d] : j["decoders"].items())
                d.erase("seq");
              return j;
            };
            if (view(*c) != view(s->last_cluster))
              emit({"cluster", *c});
            s->last_cluster = *c;
          }
        std::optional<json> st;
        try {
          st = cl.status(run_id, 2000);
        } catch (const coordinator_error& e) {
          if (e.exit_code() != exit_code::no_such_run || !follow_latest)
            throw;
        }
        if (st) {
          const bool fresh = s->last_run.is_null() || s->last_run["run_id"] != (*st)["run_id"];
          for (auto& e : events::run_events(s->last_run, *st)) {
            if (e.name == "end" && !follow_latest)
              s->ended = true;
            if (e.name == "run" && !s->plan.empty()) {
              // Against the plan: how many jobs it would have finished by now, and the ETA
              // at the pace kept so far (as `vidline wait` shows it).
              const double now_s = (*st).value("now_s", 0.0);
              const auto done = e.data.value("done", std::size_t{0});
              e.data["planned_done"] =
                std::upper_bound(s->plan.begin(), s->plan.end(), now_s) - s->plan.begin();
              if (done < s->plan.size()) {
                const double at = done == 0 ? 0 : s->plan[done - 1];
                double left = s->plan.back() - at;
                if (done > 0 && at > 0)
                  left *= std::max(1.0, now_s / at);
                e.data["eta_s"] = left;
              }
            }
            emit(e);
          }
          if (fresh) {
            s->plan = planned_finish_times(*cluster, *st);
            emit({"plan", {{"run_id", (*st)["run_id"]},
                           {"planned_finish_s", s->plan},
                           {"makespan_s", s->plan.empty() ? json(nullptr) : json(s->plan.back())}}});
            emit({"run", events::run_summary(*st)});
          }
          s->last_run = *st;
        }
      } catch (const coordinator_error& e) {
        emit({"error", {{"error", e.what()}}});
        if (!follow_latest)
          s->ended = true;
      }
      const auto now = std::chrono::steady_clock::now();
      if (out.empty() && now - s->last_write > std::chrono::seconds(10))
        out = ": keepalive\n\n";
      if (!out.empty()) {
        s->last_write = now;
        if (!sink.write(out.data(), out.size()))
          return false;
      }
      if (s->ended) {
        sink.done();
        return true;
      }
      pause(std::chrono::milliseconds(250));
      return true;
    },
    [this](bool) { streams.fetch_sub(1); });
}

void http_server::impl::dashboard(const httplib::Request& req, httplib::Response& res) {
  std::string name = req.matches[1];
  if (name.empty())
    name = "index.html";
  for (auto& f : dashboard_files::all)
    if (name == f.path) {
      res.set_content(f.body, f.type);
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                     "script-src 'self'; connect-src 'self'");
      return;
    }
  send_error(res, 404, "no dashboard file " + name);
}

void http_server::impl::put_input(const httplib::Request& req, httplib::Response& res) {
  // `vidline run` uploads over the bus; this is the same store for HTTP clients
  // (nodes/inputs.hpp). The coordinator's node keeps it, named by the digest given.
  const std::string sha = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
  if (req.has_header("Transfer-Encoding") && req.body.size() > max_input_bytes) {
    send_error(res, 413, "the image is over the limit of " + std::to_string(max_input_bytes) +
                             " bytes for an input");
    return;
  }
  input_store::whole_result r;
  {
    std::lock_guard<std::mutex> l(inputs_mutex);
    r = inputs->put_whole(sha, req.body);
  }
  if (r.status >= 400) {
    send_error(res, r.status, r.error);
    return;
  }
  res.set_header("Location", "/v1/inputs/" + sha);
  send_json(res, r.status, {{"sha256", sha}, {"bytes", req.body.size()},
                            {"stored", r.status == 201 ? "now" : "before"}});
}

// -- lifetime --------------------------------------------------------------------------------

http_server::http_server(std::shared_ptr<const config::cluster> cluster, const std::string& host)
    : p_(std::make_unique<impl>()) {
  p_->cluster = std::move(cluster);
  p_->self = p_->cluster->find_host(host);
  if (p_->self == nullptr || p_->self->http.port == 0)
    throw std::runtime_error("host " + host + " has no http endpoint");
  p_->coordinator = p_->cluster->coordinator == host;
  const auto& e = p_->self->http;
  if (!e.token_file.empty())
    p_->token = read_token_file(e.token_file);
  p_->inputs = std::make_unique<input_store>(p_->self->data_dir + "/" + inputs_subdir);
  // PUT /v1/inputs takes up to max_input_bytes; the pre-routing handler holds every other
  // request to max_request_bytes by its Content-Length.
  p_->svr.set_payload_max_length(
      std::max<uint64_t>(e.max_request_bytes, p_->coordinator ? max_input_bytes : 0));
  p_->svr.set_read_timeout(10);
  p_->svr.set_write_timeout(10);
  p_->svr.set_keep_alive_max_count(100);
  p_->svr.new_task_queue = [] { return new httplib::ThreadPool(impl::max_streams + 8); };
  p_->install();
  if (!p_->svr.bind_to_port(e.address, e.port))
    throw std::runtime_error("cannot bind http " + e.address + ":" + std::to_string(e.port) +
                             " (in use, or not an address of this machine)");
  p_->bound = "http://" + (e.address.find(':') != std::string::npos ? "[" + e.address + "]"
                                                                    : e.address) +
              ":" + std::to_string(e.port);
  p_->thread = std::thread([p = p_.get()] { p->svr.listen_after_bind(); });
  spdlog::info("http: serving {} ({}{})", p_->bound,
               p_->coordinator ? "/metrics, /v1, /dashboard/" : "/metrics, videos",
               p_->token.empty() ? "" : ", bearer token required");
}

http_server::~http_server() { stop(); }

void http_server::stop() {
  if (!p_ || !p_->thread.joinable())
    return;
  {
    std::lock_guard<std::mutex> l(p_->m);
    p_->stopping = true;
  }
  p_->cv.notify_all();
  p_->svr.stop();
  p_->thread.join();
}

std::string http_server::url() const { return p_->bound; }

} // namespace vidline::nodes
