#include "backends/exec/exec_options.hpp"

#include <algorithm>
#include <stdexcept>

#include "config/config.hpp"
#include "config/json_reader.hpp"

namespace vidline::backends::exec {
namespace {

using config::config_error;
using config::detail::object_reader;
using json = nlohmann::json;

bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

/// A shot's own placeholder: {param.NAME} or {input.NAME}, NAME as a workflow names it.
bool shot_placeholder(std::string_view n) {
  for (std::string_view group : {"param.", "input."})
    if (n.size() > group.size() && n.substr(0, group.size()) == group)
      return std::all_of(n.begin() + group.size(), n.end(), [](char c) {
        return name_char(c) || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
      });
  return false;
}

/// Calls on_text(literal) and on_name(placeholder) in order; throws on a malformed template.
template <class Text, class Name>
void scan(std::string_view t, Text on_text, Name on_name) {
  std::size_t i = 0;
  while (i < t.size()) {
    char c = t[i];
    if (c == '{' && i + 1 < t.size() && t[i + 1] == '{') {
      on_text("{");
      i += 2;
    } else if (c == '}' && i + 1 < t.size() && t[i + 1] == '}') {
      on_text("}");
      i += 2;
    } else if (c == '{') {
      auto close = t.find('}', i + 1);
      if (close == std::string_view::npos)
        throw std::invalid_argument("'{' at offset " + std::to_string(i) +
                                    " is not closed (write '{{' for a literal brace)");
      auto name = t.substr(i + 1, close - i - 1);
      if (name.empty() || (!std::all_of(name.begin(), name.end(), name_char)
                           && !shot_placeholder(name)))
        throw std::invalid_argument("'{" + std::string(name) +
                                    "}' is not a placeholder (names are a-z, 0-9, _; write "
                                    "'{{' for a literal brace)");
      on_name(name);
      i = close + 1;
    } else if (c == '}') {
      throw std::invalid_argument("'}' at offset " + std::to_string(i) +
                                  " closes nothing (write '}}' for a literal brace)");
    } else {
      auto next = t.find_first_of("{}", i);
      if (next == std::string_view::npos)
        next = t.size();
      on_text(t.substr(i, next - i));
      i = next;
    }
  }
}

std::vector<std::pair<std::string, std::string>> read_env(const json& j, const std::string& path) {
  config::detail::expect_object(j, path);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [k, v] : j.items()) {
    std::string p = config::detail::child(path, k);
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
      throw config_error(p, "not a valid environment variable name");
    out.emplace_back(k, config::detail::read_string(v, p));
  }
  return out;
}

void check_placeholders(const std::string& tmpl, const std::string& path,
                        const std::vector<std::string>& allowed, const char* stage) {
  std::vector<std::string> names;
  try {
    names = placeholders_in(tmpl);
  } catch (const std::invalid_argument& e) {
    throw config_error(path, e.what());
  }
  const bool shot = std::find(allowed.begin(), allowed.end(), "workflow") != allowed.end();
  for (auto& n : names)
    if (!(shot && shot_placeholder(n)) && std::find(allowed.begin(), allowed.end(), n) == allowed.end())
      throw config_error(path, "the " + std::string(stage) + " stage has no placeholder {" + n +
                                 "}" + config::detail::did_you_mean(n, allowed) +
                                 "; it has: " + config::detail::join(allowed));
}

stage_command read_stage(const json& j, const std::string& path, const char* stage,
                         const std::vector<std::string>& allowed) {
  object_reader r(j, path, {"argv", "env", "timeout_s"});
  stage_command c;
  c.argv = r.strings("argv");
  if (c.argv.empty() || c.argv[0].empty())
    throw config_error(r.path_of("argv"), "must name a program (argv[0])");
  for (std::size_t i = 0; i < c.argv.size(); ++i) {
    auto p = config::detail::child(r.path_of("argv"), i);
    if (c.argv[i].find('\0') != std::string::npos)
      throw config_error(p, "holds a NUL byte");
    check_placeholders(c.argv[i], p, allowed, stage);
  }
  if (!c.argv[0].empty() && c.argv[0][0] == '{')
    throw config_error(config::detail::child(r.path_of("argv"), 0),
                       "the program must be written out, not a placeholder");
  if (r.has("env")) {
    c.env = read_env(r.required("env"), r.path_of("env"));
    for (auto& [k, v] : c.env)
      check_placeholders(v, config::detail::child(r.path_of("env"), k), allowed, stage);
  }
  c.timeout_s = r.number_or("timeout_s", 0);
  if (!(c.timeout_s >= 0) || c.timeout_s > 2592000)
    throw config_error(r.path_of("timeout_s"), "must be between 0 and 2592000 seconds");
  return c;
}

std::vector<int> read_codes(const object_reader& r, const char* key, std::vector<int> fallback) {
  if (!r.has(key))
    return fallback;
  const json& a = r.required(key);
  config::detail::expect_array(a, r.path_of(key));
  std::vector<int> out;
  for (std::size_t i = 0; i < a.size(); ++i)
    out.push_back(static_cast<int>(
      config::detail::read_integer(a[i], config::detail::child(r.path_of(key), i), 1, 255)));
  return out;
}

} // namespace

const std::vector<std::string>& encode_placeholders() {
  static const std::vector<std::string> p{"prompt_file", "output", "work_dir", "devices",
                                          "vendor"};
  return p;
}

const std::vector<std::string>& sample_placeholders() {
  static const std::vector<std::string> p{
    "prompt_file", "conditioning", "reference", "output", "work_dir", "devices", "vendor",
    "run_id",      "index",        "seed",      "width",  "height",   "seconds", "frames",
    "fps",         "workflow",     "model",     "negative_prompt", "checkpoint_dir",
    "checkpoint_interval_s", "resume_file", "resume_step"};
  return p;
}

const std::vector<std::string>& decode_placeholders() {
  static const std::vector<std::string> p{
    "latent",  "latent_sha256", "output", "work_dir", "devices", "vendor", "run_id", "index",
    "seed",    "width",         "height", "seconds",  "frames",  "fps",    "prompt_file",
    "workflow", "model",        "negative_prompt"};
  return p;
}

std::vector<std::string> placeholders_in(std::string_view tmpl) {
  std::vector<std::string> names;
  scan(tmpl, [](std::string_view) {}, [&](std::string_view n) { names.emplace_back(n); });
  return names;
}

std::string expand(std::string_view tmpl, const std::map<std::string, std::string>& values) {
  std::string out;
  scan(
    tmpl, [&](std::string_view t) { out.append(t); },
    [&](std::string_view n) {
      auto it = values.find(std::string(n));
      if (it == values.end() && shot_placeholder(n))
        return;  // a param or input the job does not carry
      if (it == values.end())
        throw std::invalid_argument("no value for placeholder {" + std::string(n) + "}");
      out += it->second;
    });
  return out;
}

exec_options parse_exec_options(const std::string& name, const nlohmann::json& options) {
  std::string path = "/backends/" + name + "/options";
  if (options.is_null())
    throw config_error(path, "an exec backend needs options (at least 'sample' or 'decode')");
  object_reader r(options, path,
                  {"encode", "sample", "decode", "env", "capacity_patterns",
                   "transient_exit_codes", "fatal_exit_codes", "other_exits", "kill_grace_s",
                   "log_dir", "fps", "frame_offset"});
  exec_options o;
  if (r.has("encode"))
    o.encode = read_stage(r.required("encode"), r.path_of("encode"), "encode",
                          encode_placeholders());
  if (r.has("sample"))
    o.sample = read_stage(r.required("sample"), r.path_of("sample"), "sample",
                          sample_placeholders());
  if (r.has("decode"))
    o.decode = read_stage(r.required("decode"), r.path_of("decode"), "decode",
                          decode_placeholders());
  if (!o.sample && !o.decode && !o.encode)
    throw config_error(path, "names no stage: give 'sample', 'decode' and/or 'encode'");
  if (r.has("env"))
    o.env = read_env(r.required("env"), r.path_of("env"));
  if (r.has("capacity_patterns"))
    for (auto& p : r.strings("capacity_patterns")) {
      if (p.empty())
        throw config_error(r.path_of("capacity_patterns"), "an empty pattern matches everything");
      o.capacity_patterns.push_back(p);
    }
  o.transient_exit_codes = read_codes(r, "transient_exit_codes", o.transient_exit_codes);
  o.fatal_exit_codes = read_codes(r, "fatal_exit_codes", o.fatal_exit_codes);
  for (int c : o.transient_exit_codes)
    if (std::find(o.fatal_exit_codes.begin(), o.fatal_exit_codes.end(), c) !=
        o.fatal_exit_codes.end())
      throw config_error(r.path_of("fatal_exit_codes"),
                         "exit code " + std::to_string(c) + " is also in transient_exit_codes");
  o.other_exits = r.string_or("other_exits", o.other_exits);
  if (o.other_exits != "transient" && o.other_exits != "fatal")
    throw config_error(r.path_of("other_exits"),
                       "must be 'transient' or 'fatal', got '" + o.other_exits + "'");
  o.kill_grace_s = r.number_or("kill_grace_s", o.kill_grace_s);
  if (!(o.kill_grace_s >= 0) || o.kill_grace_s > 600)
    throw config_error(r.path_of("kill_grace_s"), "must be between 0 and 600 seconds");
  o.log_dir = r.string_or("log_dir", "");
  if (!o.log_dir.empty() && o.log_dir[0] != '/')
    throw config_error(r.path_of("log_dir"), "must be an absolute path");
  if (r.has("fps"))
    o.fps = static_cast<uint32_t>(r.integer("fps", 1, 1000));
  if (r.has("frame_offset"))
    o.frame_offset = static_cast<uint32_t>(r.integer("frame_offset", 0, 1000));
  return o;
}

} // namespace vidline::backends::exec
