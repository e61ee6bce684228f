#include "backends/worker/worker_options.hpp"

#include <algorithm>

#include "backends/exec/exec_options.hpp"
#include "config/config.hpp"
#include "config/json_reader.hpp"

namespace vidline::backends::worker {
namespace {

using config::config_error;
using config::detail::object_reader;

void check_template(const std::string& tmpl, const std::string& path) {
  std::vector<std::string> names;
  try {
    names = exec::placeholders_in(tmpl);
  } catch (const std::invalid_argument& e) {
    throw config_error(path, e.what());
  }
  auto& allowed = worker_placeholders();
  for (auto& n : names)
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end())
      throw config_error(path, "a worker has no placeholder {" + n + "}" +
                                 config::detail::did_you_mean(n, allowed) +
                                 "; it has: " + config::detail::join(allowed) +
                                 " (a job's values come in each request)");
}

double seconds(const object_reader& r, const char* key, double fallback, double lo, double hi) {
  double v = r.number_or(key, fallback);
  if (!(v >= lo) || v > hi)
    throw config_error(r.path_of(key), "must be between " + std::to_string(int(lo)) + " and " +
                                         std::to_string(int(hi)) + " seconds");
  return v;
}

} // namespace

const std::vector<std::string>& worker_placeholders() {
  static const std::vector<std::string> p{"devices", "vendor", "owner", "stages"};
  return p;
}

worker_options parse_worker_options(const std::string& name, const nlohmann::json& options) {
  std::string path = "/backends/" + name + "/options";
  if (options.is_null())
    throw config_error(path, "a worker backend needs options (at least 'argv')");
  object_reader r(options, path,
                  {"argv", "env", "start_timeout_s", "stop_grace_s", "cancel_grace_s",
                   "health_interval_s", "health_timeout_s", "max_restarts", "restart_period_s",
                   "capacity_patterns", "log_dir", "fps", "frame_offset"});
  worker_options o;
  o.argv = r.strings("argv");
  if (o.argv.empty() || o.argv[0].empty())
    throw config_error(r.path_of("argv"), "must name a program (argv[0])");
  for (std::size_t i = 0; i < o.argv.size(); ++i) {
    auto p = config::detail::child(r.path_of("argv"), i);
    if (o.argv[i].find('\0') != std::string::npos)
      throw config_error(p, "holds a NUL byte");
    check_template(o.argv[i], p);
  }
  if (o.argv[0][0] == '{')
    throw config_error(config::detail::child(r.path_of("argv"), 0),
                       "the program must be written out, not a placeholder");
  if (r.has("env")) {
    const auto& j = r.required("env");
    config::detail::expect_object(j, r.path_of("env"));
    for (auto& [k, v] : j.items()) {
      std::string p = config::detail::child(r.path_of("env"), k);
      if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
        throw config_error(p, "not a valid environment variable name");
      o.env.emplace_back(k, config::detail::read_string(v, p));
      check_template(o.env.back().second, p);
    }
  }
  o.start_timeout_s = seconds(r, "start_timeout_s", o.start_timeout_s, 1, 86400);
  o.stop_grace_s = seconds(r, "stop_grace_s", o.stop_grace_s, 0, 600);
  o.cancel_grace_s = seconds(r, "cancel_grace_s", o.cancel_grace_s, 0, 600);
  o.health_interval_s = seconds(r, "health_interval_s", o.health_interval_s, 0, 86400);
  o.health_timeout_s = seconds(r, "health_timeout_s", o.health_timeout_s, 0.1, 3600);
  if (r.has("max_restarts"))
    o.max_restarts = static_cast<int>(r.integer("max_restarts", 0, 1000));
  o.restart_period_s = seconds(r, "restart_period_s", o.restart_period_s, 1, 86400);
  if (r.has("capacity_patterns"))
    for (auto& p : r.strings("capacity_patterns")) {
      if (p.empty())
        throw config_error(r.path_of("capacity_patterns"), "an empty pattern matches everything");
      o.capacity_patterns.push_back(p);
    }
  o.log_dir = r.string_or("log_dir", "");
  if (!o.log_dir.empty() && o.log_dir[0] != '/')
    throw config_error(r.path_of("log_dir"), "must be an absolute path");
  if (r.has("fps"))
    o.fps = static_cast<uint32_t>(r.integer("fps", 1, 1000));
  if (r.has("frame_offset"))
    o.frame_offset = static_cast<uint32_t>(r.integer("frame_offset", 0, 1000));
  return o;
}

} // namespace vidline::backends::worker
