#include "nodes/http_requests.hpp"

#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/digest.hpp"
#include "common/files.hpp"
#include "common/text.hpp"
#include "config/workflows.hpp"
#include "nodes/verbs/shot_graph_fields.hpp"

namespace vidline::nodes {

using nlohmann::json;

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
  if (auto why = nodes::verbs::read_graph_fields(j, s); !why.empty()) {
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

/// The batch fields a shot list replaces: each shot has its own.
const std::vector<std::string> batch_fields{"prompt", "width", "height", "seconds", "count",
                                           "seed"};

/// The `shots` of a body (POST /v1/runs, POST /v1/runs/{id}/jobs): a non-empty array of
/// shots read as read_shot reads them, with none of the batch fields beside it (`form`
/// begins the message that says so: "a shot list ('shots') comes").
bool read_shots(const json& doc, const std::string& form, std::vector<msg::shot>& out,
                api_error& err) {
  for (auto& k : batch_fields)
    if (doc.contains(k)) {
      err = {400, "field '" + k + "': " + form + " without prompt, width, height, seconds, "
                                                 "count and seed (each shot has its own)"};
      return false;
    }
  const json& shots = doc["shots"];
  if (!shots.is_array() || shots.empty()) {
    err = {400, "field 'shots' must be a non-empty array of shots, got " +
                    (shots.is_array() ? std::string("an empty array") : type_of(shots))};
    return false;
  }
  for (std::size_t i = 0; i < shots.size(); ++i) {
    msg::shot s;
    if (!read_shot(shots[i], "shots[" + std::to_string(i) + "].", s, err))
      return false;
    out.push_back(std::move(s));
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
    if (!read_shots(*doc, "a shot list ('shots') comes", r.shots, err))
      return std::nullopt;
    if (doc->contains("reference") && !(*doc)["reference"].is_null() &&
        !read_text(*doc, "reference", r.reference, err))
      return std::nullopt;
    if (doc->contains("request_id") && !read_text(*doc, "request_id", r.request_id, err))
      return std::nullopt;
  } else {
    if (!check_fields(*doc, batch_fields,
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
  auto doc = read_body(body, {},
                       {"prompt", "width", "height", "seconds", "count", "seed", "shots",
                        "reference", "reference_sha256", "request_id"}, err);
  if (!doc)
    return std::nullopt;
  msg::submit_jobs r;
  r.run_id = run_id;
  if (doc->contains("shots")) {
    // The shot form, as POST /v1/runs takes it (names included).
    if (!read_shots(*doc, "shots ('shots') come", r.shots, err))
      return std::nullopt;
    if (doc->contains("request_id") && !read_text(*doc, "request_id", r.request_id, err))
      return std::nullopt;
    if (doc->contains("reference") || doc->contains("reference_sha256")) {
      err = {400, "field 'reference': with 'shots', each shot names its own reference"};
      return std::nullopt;
    }
    return r;
  }
  if (!check_fields(*doc, batch_fields, {"reference", "reference_sha256", "request_id"}, err) ||
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

} // namespace vidline::nodes
