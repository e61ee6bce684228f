#include "backends/worker/protocol.hpp"

#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::backends::worker {
namespace {

using nlohmann::json;

std::string line_of(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

json header(const char* type) { return {{"v", protocol_version}, {"type", type}}; }

/// Reads an optional field of `j` into `out`; false (with `error`) when it has another type.
template <class T>
bool field(const json& j, const char* name, T& out, std::string& error) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null())
    return true;
  try {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string())
        throw std::invalid_argument("");
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean())
        throw std::invalid_argument("");
    } else if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
        throw std::invalid_argument("");
      if (it->get<uint64_t>() > std::numeric_limits<T>::max())
        throw std::invalid_argument("");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number())
        throw std::invalid_argument("");
    }
    out = it->get<T>();
    return true;
  } catch (const std::exception&) {
    error = std::string("field '") + name + "' has the wrong type or range";
    return false;
  }
}

/// The object of a line, checked for version and type; nullopt with `error`.
std::optional<json> parse(std::string_view line, std::string& type, std::string& error) {
  json j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer()) {
    error = "no protocol version 'v'";
    return std::nullopt;
  }
  if (v->get<int64_t>() < oldest_worker_version || v->get<int64_t>() > protocol_version) {
    error = "protocol version " + v->dump() + ", this node speaks " +
            std::to_string(oldest_worker_version) + " to " + std::to_string(protocol_version);
    return std::nullopt;
  }
  auto t = j.find("type");
  if (t == j.end() || !t->is_string()) {
    error = "no message 'type'";
    return std::nullopt;
  }
  type = t->get<std::string>();
  return j;
}

} // namespace

std::string encode_request(const request& r) {
  json j = header("request");
  j["id"] = r.id;
  j["stage"] = r.stage;
  j["job"] = {{"run_id", r.run_id}, {"index", r.index},     {"seed", r.seed},
              {"width", r.width},   {"height", r.height},   {"seconds", r.seconds},
              {"frames", r.frames}, {"fps", r.fps},         {"prompt", r.prompt}};
  j["job"]["workflow"] = r.workflow;
  j["job"]["model"] = r.model;
  j["job"]["negative_prompt"] = r.negative_prompt;
  json params = json::object();
  for (auto& [name, value] : r.params_json)
    params[name] = json::parse(value, nullptr, false);
  j["job"]["params"] = params;
  j["inputs"] = {{"prompt_file", r.prompt_file}, {"conditioning", r.conditioning},
                 {"latent", r.latent},           {"latent_sha256", r.latent_sha256},
                 {"reference", r.reference}};
  for (auto& [name, path] : r.named_inputs)
    if (!j["inputs"].contains(name))  // the fixed inputs keep their meaning
      j["inputs"][name] = path;
  j["output"] = r.output;
  j["work_dir"] = r.work_dir;
  j["timeout_s"] = r.timeout_s;
  if (!r.checkpoint_dir.empty())
    j["checkpoint"] = {{"dir", r.checkpoint_dir}, {"interval_s", r.checkpoint_interval_s}};
  if (r.resume_step > 0)
    j["resume"] = {{"step", r.resume_step}, {"file", r.resume_file}, {"sha256", r.resume_sha256}};
  return line_of(j);
}

std::string encode_preempt(const std::string& id) {
  json j = header("preempt");
  j["id"] = id;
  return line_of(j);
}

std::string encode_cancel(const std::string& id) {
  json j = header("cancel");
  j["id"] = id;
  return line_of(j);
}

std::string encode_ping(uint64_t seq) {
  json j = header("ping");
  j["seq"] = seq;
  return line_of(j);
}

std::string encode_shutdown() { return line_of(header("shutdown")); }

std::string encode_load(const load_request& l) {
  json j = header("load");
  j["id"] = l.id;
  j["stage"] = l.stage;
  j["workflow"] = l.workflow;
  j["model"] = l.model;
  return line_of(j);
}

std::optional<worker_message> decode_worker_line(std::string_view line, std::string& error) {
  std::string type;
  auto j = parse(line, type, error);
  if (!j)
    return std::nullopt;
  worker_message m;
  if (type == "hello") {
    m.type = worker_message::kind::hello;
    auto s = j->find("stages");
    if (s == j->end() || !s->is_array()) {
      error = "hello: 'stages' must be a list";
      return std::nullopt;
    }
    for (auto& x : *s) {
      if (!x.is_string() || (x != "encode" && x != "sample" && x != "decode")) {
        error = "hello: unknown stage " + x.dump() + " (known: encode, sample, decode)";
        return std::nullopt;
      }
      m.stages.push_back(x.get<std::string>());
    }
    if (!field(*j, "load", m.takes_load, error))
      return std::nullopt;
    return m;
  }
  if (type == "pong") {
    m.type = worker_message::kind::pong;
    if (!field(*j, "seq", m.seq, error))
      return std::nullopt;
    return m;
  }
  if (type != "progress" && type != "result" && type != "loaded" && type != "checkpoint") {
    error = "unknown message type '" + type + "'";
    return std::nullopt;
  }
  if (!field(*j, "id", m.id, error))
    return std::nullopt;
  if (m.id.empty()) {
    error = type + ": no request 'id'";
    return std::nullopt;
  }
  if (type == "progress") {
    m.type = worker_message::kind::progress;
    if (!field(*j, "step", m.step, error) || !field(*j, "steps", m.steps, error))
      return std::nullopt;
    if (m.steps == 0 || m.step > m.steps) {
      error = "progress: step " + std::to_string(m.step) + " of " + std::to_string(m.steps) +
              " (steps must be > 0 and step <= steps)";
      return std::nullopt;
    }
    return m;
  }
  if (type == "checkpoint") {
    m.type = worker_message::kind::checkpoint;
    if (!field(*j, "step", m.step, error) || !field(*j, "steps", m.steps, error)
        || !field(*j, "file", m.file, error))
      return std::nullopt;
    if (m.step == 0 || m.file.empty() || (m.steps != 0 && m.step > m.steps)) {
      error = "checkpoint: needs 'file' and a 'step' > 0 (and <= 'steps' when given)";
      return std::nullopt;
    }
    return m;
  }
  m.type = type == "loaded" ? worker_message::kind::loaded : worker_message::kind::result;
  if (type == "loaded")
    m.outcome = msg::outcome::ok;  // a loaded without an outcome says it loaded
  if (!field(*j, "outcome", m.outcome, error) || !field(*j, "cold", m.cold, error) ||
      !field(*j, "error", m.error, error) || !field(*j, "model", m.model, error) ||
      !field(*j, "model_identity", m.model_identity, error) ||
      !field(*j, "load_s", m.load_s, error))
    return std::nullopt;
  if (m.outcome != msg::outcome::ok && m.outcome != msg::outcome::capacity &&
      m.outcome != msg::outcome::transient && m.outcome != msg::outcome::fatal &&
      !(type == "result" && m.outcome == msg::outcome::preempted)) {
    error = type + ": outcome '" + m.outcome +
            "' (known: ok, capacity, transient, fatal, preempted)";
    return std::nullopt;
  }
  return m;
}

std::optional<request> decode_request(std::string_view line, std::string& error) {
  std::string type;
  auto j = parse(line, type, error);
  if (!j)
    return std::nullopt;
  if (type != "request") {
    error = "not a request but '" + type + "'";
    return std::nullopt;
  }
  request r;
  json job = j->value("job", json::object()), in = j->value("inputs", json::object());
  if (!job.is_object() || !in.is_object()) {
    error = "'job' and 'inputs' must be objects";
    return std::nullopt;
  }
  bool ok = field(*j, "id", r.id, error) && field(*j, "stage", r.stage, error) &&
            field(*j, "output", r.output, error) && field(*j, "work_dir", r.work_dir, error) &&
            field(*j, "timeout_s", r.timeout_s, error) && field(job, "run_id", r.run_id, error) &&
            field(job, "index", r.index, error) && field(job, "seed", r.seed, error) &&
            field(job, "width", r.width, error) && field(job, "height", r.height, error) &&
            field(job, "seconds", r.seconds, error) && field(job, "frames", r.frames, error) &&
            field(job, "fps", r.fps, error) && field(job, "prompt", r.prompt, error) &&
            field(in, "prompt_file", r.prompt_file, error) &&
            field(in, "conditioning", r.conditioning, error) && field(in, "latent", r.latent, error) &&
            field(in, "latent_sha256", r.latent_sha256, error) &&
            field(in, "reference", r.reference, error);
  if (!ok)
    return std::nullopt;
  if (auto c = j->find("checkpoint"); c != j->end() && c->is_object())
    if (!field(*c, "dir", r.checkpoint_dir, error)
        || !field(*c, "interval_s", r.checkpoint_interval_s, error))
      return std::nullopt;
  if (auto c = j->find("resume"); c != j->end() && c->is_object())
    if (!field(*c, "step", r.resume_step, error) || !field(*c, "file", r.resume_file, error)
        || !field(*c, "sha256", r.resume_sha256, error))
      return std::nullopt;
  r.workflow = job.value("workflow", "");
  r.model = job.value("model", "");
  r.negative_prompt = job.value("negative_prompt", "");
  if (auto p = job.find("params"); p != job.end() && p->is_object())
    for (auto& [name, value] : p->items())
      r.params_json.emplace_back(name, value.dump());
  for (auto& [name, value] : in.items())
    if (value.is_string() && name != "prompt_file" && name != "conditioning" && name != "latent" &&
        name != "latent_sha256" && name != "reference")
      r.named_inputs.emplace_back(name, value.get<std::string>());
  if (r.id.empty() || r.output.empty()) {
    error = "request: 'id' and 'output' are required";
    return std::nullopt;
  }
  return r;
}

std::optional<load_request> decode_load(std::string_view line, std::string& error) {
  std::string type;
  auto j = parse(line, type, error);
  if (!j)
    return std::nullopt;
  if (type != "load") {
    error = "not a load but '" + type + "'";
    return std::nullopt;
  }
  load_request l;
  if (!field(*j, "id", l.id, error) || !field(*j, "stage", l.stage, error) ||
      !field(*j, "workflow", l.workflow, error) || !field(*j, "model", l.model, error))
    return std::nullopt;
  if (l.id.empty()) {
    error = "load: no 'id'";
    return std::nullopt;
  }
  return l;
}

bool line_reader::feed(std::string_view bytes) {
  buf_.append(bytes);
  auto nl = buf_.find('\n', scanned_);
  if (nl == std::string::npos) {
    scanned_ = buf_.size();
    return buf_.size() <= max_line_bytes;
  }
  scanned_ = 0;
  return true;
}

std::optional<std::string> line_reader::next() {
  auto nl = buf_.find('\n');
  if (nl == std::string::npos) {
    scanned_ = buf_.size();
    return std::nullopt;
  }
  std::string line = buf_.substr(0, nl);
  buf_.erase(0, nl + 1);
  scanned_ = 0;
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  return line;
}

} // namespace vidline::backends::worker
