#include "backends/comfyui/comfyui_options.hpp"

#include <algorithm>

#include "backends/comfyui/bundle.hpp"
#include "backends/comfyui/template.hpp"
#include "backends/exec/exec_options.hpp"
#include "backends/process/socket_paths.hpp"
#include "common/files.hpp"
#include "config/config.hpp"
#include "config/json_reader.hpp"

namespace vidline::backends::comfyui {
namespace {

using config::config_error;
using config::detail::object_reader;
using json = nlohmann::json;

/// A workflow template given inline (an object) or as an absolute file path.
json load_workflow(const json& j, const std::string& path) {
  json w;
  if (j.is_object()) {
    w = j;
  } else if (j.is_string()) {
    std::string file = j.get<std::string>();
    if (file.empty() || file[0] != '/')
      throw config_error(path, "give an absolute path to an API-format workflow file, or the "
                               "workflow itself as an object");
    std::string text;
    try {
      text = files::read_all(file);
    } catch (const std::exception& e) {
      throw config_error(path, e.what());
    }
    w = json::parse(text, nullptr, false);
    if (w.is_discarded())
      throw config_error(path, file + " is not valid JSON");
  } else {
    throw config_error(path, "must be a file path (string) or a workflow (object), got " +
                               config::detail::type_name(j));
  }
  if (auto why = check_api_format(w); !why.empty())
    throw config_error(path, why);
  return w;
}

void check_placeholders(const json& w, const std::string& path,
                        const std::vector<std::string>& allowed, bool latent_parts) {
  template_values dummy;
  for (auto& n : placeholders_of(w)) {
    bool ok = std::find(allowed.begin(), allowed.end(), n) != allowed.end();
    if (!ok && latent_parts && n.rfind("latent_", 0) == 0 && valid_part_name(n.substr(7)))
      ok = true;
    if (!ok && !latent_parts && is_shot_placeholder(n))  // the shot's params and inputs
      ok = true;
    if (!ok)
      throw config_error(path, "the workflow uses {{" + n + "}}, which this stage does not have" +
                                 config::detail::did_you_mean(n, allowed) +
                                 "; it has: " + config::detail::join(allowed) +
                                 (latent_parts ? ", latent_<part>" : ""));
    dummy[n] = "x";
  }
  // What is left to fail is malformed: a "{{" that is no placeholder, one in a key.
  auto probe = render(w, dummy);
  if (!probe.ok)
    throw config_error(path + probe.where, probe.error);
}

double seconds_in(const object_reader& r, const char* key, double fallback, double lo, double hi) {
  double v = r.number_or(key, fallback);
  if (!(v >= lo) || v > hi)
    throw config_error(r.path_of(key), "must be between " + std::to_string(lo) + " and " +
                                         std::to_string(hi) + " seconds");
  return v;
}

process_options read_process(const json& j, const std::string& path) {
  object_reader r(j, path,
                  {"argv", "env", "base_dir", "runtime_dir", "start_timeout_s", "max_restarts",
                   "restart_period_s", "stop_grace_s"});
  process_options p;
  p.argv = r.strings("argv");
  if (p.argv.empty() || p.argv[0].empty())
    throw config_error(r.path_of("argv"), "must name a program (argv[0])");
  static const std::vector<std::string> allowed{"port",       "host",     "base_dir",
                                                "input_dir",  "output_dir", "temp_dir",
                                                "user_dir",   "database", "runtime_dir",
                                                "devices"};
  auto check = [&](const std::string& t, const std::string& at) {
    try {
      for (auto& n : exec::placeholders_in(t))
        if (std::find(allowed.begin(), allowed.end(), n) == allowed.end())
          throw config_error(at, "no placeholder {" + n + "} here" +
                                   config::detail::did_you_mean(n, allowed) +
                                   "; there are: " + config::detail::join(allowed));
    } catch (const std::invalid_argument& e) {
      throw config_error(at, e.what());
    }
  };
  for (std::size_t i = 0; i < p.argv.size(); ++i)
    check(p.argv[i], config::detail::child(r.path_of("argv"), i));
  if (r.has("env")) {
    config::detail::expect_object(r.required("env"), r.path_of("env"));
    for (auto& [k, v] : r.required("env").items()) {
      auto at = config::detail::child(r.path_of("env"), k);
      if (k.empty() || k.find('=') != std::string::npos)
        throw config_error(at, "not a valid environment variable name");
      p.env.emplace_back(k, config::detail::read_string(v, at));
      check(p.env.back().second, at);
    }
  }
  p.base_dir = r.string("base_dir");
  if (p.base_dir.empty() || p.base_dir[0] != '/')
    throw config_error(r.path_of("base_dir"), "must be an absolute path");
  p.runtime_dir = r.string_or("runtime_dir", "");
  if (!p.runtime_dir.empty() && p.runtime_dir[0] != '/')
    throw config_error(r.path_of("runtime_dir"), "must be an absolute path");
  if (!p.runtime_dir.empty())
    if (auto why = process::runtime_dir_problem(p.runtime_dir); !why.empty())
      throw config_error(r.path_of("runtime_dir"), why);
  p.start_timeout_s = seconds_in(r, "start_timeout_s", p.start_timeout_s, 1, 3600);
  if (r.has("max_restarts"))
    p.max_restarts = static_cast<int>(r.integer("max_restarts", 0, 1000));
  p.restart_period_s = seconds_in(r, "restart_period_s", p.restart_period_s, 0.001, 86400);
  p.stop_grace_s = seconds_in(r, "stop_grace_s", p.stop_grace_s, 0, 600);
  return p;
}

} // namespace

const std::vector<std::string>& sample_workflow_placeholders() {
  static const std::vector<std::string> p{
    "prompt", "negative_prompt", "seed", "width", "height", "seconds", "frames", "fps",
    "reference_image", "latent_prefix", "run_id", "index", "job"};
  return p;
}

const std::vector<std::string>& decode_workflow_placeholders() {
  static const std::vector<std::string> p{
    "prompt", "negative_prompt", "seed", "width", "height", "seconds", "frames", "fps",
    "output_prefix", "run_id", "index", "job"};
  return p;
}

comfyui_options parse_comfyui_options(const std::string& name, const nlohmann::json& options) {
  std::string path = "/backends/" + name + "/options";
  if (options.is_null())
    throw config_error(path, "a comfyui backend needs options (at least 'url')");
  object_reader r(options, path,
                  {"url", "sample_workflow", "decode_workflow", "latents", "video_output",
                   "poll_interval_s", "request_timeout_s", "connect_timeout_s", "unreachable_s",
                   "resubmit_limit", "outputs_from", "output_dir", "inputs_to", "input_dir",
                   "fps", "frame_offset", "negative_prompt", "capacity_patterns",
                   "transient_patterns", "fatal_patterns", "other_errors", "process"});
  comfyui_options o;
  o.url = r.string("url");
  try {
    o.server = endpoint::parse(o.url);
  } catch (const std::invalid_argument& e) {
    throw config_error(r.path_of("url"), e.what());
  }
  o.server.read_timeout_s = seconds_in(r, "request_timeout_s", 30, 0.1, 3600);
  o.server.connect_timeout_s = seconds_in(r, "connect_timeout_s", 5, 0.1, 600);
  o.poll_interval_s = seconds_in(r, "poll_interval_s", o.poll_interval_s, 0.01, 60);
  o.unreachable_s = seconds_in(r, "unreachable_s", o.unreachable_s, 0.1, 86400);
  if (r.has("resubmit_limit"))
    o.resubmit_limit = static_cast<int>(r.integer("resubmit_limit", 0, 100));

  if (r.has("sample_workflow")) {
    auto at = r.path_of("sample_workflow");
    o.sample_workflow = load_workflow(r.required("sample_workflow"), at);
    check_placeholders(*o.sample_workflow, at, sample_workflow_placeholders(), false);
    if (!r.has("latents"))
      throw config_error(r.path_of("latents"),
                         "missing: name the SaveLatent node of each part, e.g. {\"video\": \"12\", "
                         "\"audio\": \"13\"}");
    config::detail::expect_object(r.required("latents"), r.path_of("latents"));
    for (auto& [part, id] : r.required("latents").items()) {
      auto p = config::detail::child(r.path_of("latents"), part);
      if (!valid_part_name(part))
        throw config_error(p, "a part name is 1-32 characters of a-z, 0-9, _");
      std::string node = config::detail::read_string(id, p);
      if (!o.sample_workflow->contains(node))
        throw config_error(p, "the sample workflow has no node '" + node + "'");
      o.latents[part] = node;
    }
    if (o.latents.empty())
      throw config_error(r.path_of("latents"), "names no part");
  } else if (r.has("latents")) {
    throw config_error(r.path_of("latents"), "only with a sample_workflow");
  }
  if (r.has("decode_workflow")) {
    auto at = r.path_of("decode_workflow");
    o.decode_workflow = load_workflow(r.required("decode_workflow"), at);
    check_placeholders(*o.decode_workflow, at, decode_workflow_placeholders(), true);
    o.video_output = r.string("video_output");
    if (!o.decode_workflow->contains(o.video_output))
      throw config_error(r.path_of("video_output"),
                         "the decode workflow has no node '" + o.video_output + "'");
  } else if (r.has("video_output")) {
    throw config_error(r.path_of("video_output"), "only with a decode_workflow");
  }
  if (!o.sample_workflow && !o.decode_workflow)
    throw config_error(path, "names no workflow: give 'sample_workflow' and/or 'decode_workflow'");

  o.outputs_from = r.string_or("outputs_from", o.outputs_from);
  if (o.outputs_from != "view" && o.outputs_from != "directory")
    throw config_error(r.path_of("outputs_from"), "must be 'view' or 'directory'");
  o.output_dir = r.string_or("output_dir", "");
  if (o.outputs_from == "directory" && (o.output_dir.empty() || o.output_dir[0] != '/'))
    throw config_error(r.path_of("output_dir"),
                       "outputs_from 'directory' needs ComfyUI's output directory, absolute");
  o.inputs_to = r.string_or("inputs_to", o.inputs_to);
  if (o.inputs_to != "upload" && o.inputs_to != "directory")
    throw config_error(r.path_of("inputs_to"), "must be 'upload' or 'directory'");
  o.input_dir = r.string_or("input_dir", "");
  if (o.inputs_to == "directory" && (o.input_dir.empty() || o.input_dir[0] != '/'))
    throw config_error(r.path_of("input_dir"),
                       "inputs_to 'directory' needs ComfyUI's input directory, absolute");
  if (r.has("fps"))
    o.fps = static_cast<uint32_t>(r.integer("fps", 1, 1000));
  if (r.has("frame_offset"))
    o.frame_offset = static_cast<uint32_t>(r.integer("frame_offset", 0, 1000));
  o.negative_prompt = r.string_or("negative_prompt", "");
  auto patterns = [&](const char* key, std::vector<std::string>& out, bool replace) {
    if (!r.has(key))
      return;
    auto list = r.strings(key);
    for (auto& p : list)
      if (p.empty())
        throw config_error(r.path_of(key), "an empty pattern matches everything");
    if (replace)
      out = list;
    else
      out.insert(out.end(), list.begin(), list.end());
  };
  patterns("capacity_patterns", o.capacity_patterns, false);
  patterns("transient_patterns", o.transient_patterns, true);
  patterns("fatal_patterns", o.fatal_patterns, true);
  o.other_errors = r.string_or("other_errors", o.other_errors);
  if (o.other_errors != "transient" && o.other_errors != "fatal")
    throw config_error(r.path_of("other_errors"), "must be 'transient' or 'fatal'");
  if (r.has("process"))
    o.process = read_process(r.required("process"), r.path_of("process"));
  return o;
}

void load_workflow_templates(const config::backend& b, comfyui_options& o) {
  for (std::size_t i = 0; i < b.workflows.size(); ++i) {
    const auto& w = b.workflows[i];
    if (w.template_file.empty())
      continue;
    const std::string at = "/backends/" + b.name + "/workflows/" + std::to_string(i) + "/template";
    json t = load_workflow(json(w.template_file), at);
    check_placeholders(t, at, sample_workflow_placeholders(), false);
    o.workflow_templates[w.name] = std::move(t);
  }
}

} // namespace vidline::backends::comfyui
