#pragma once
/// The options of a `worker` backend (config `backends.<name>.options`); docs/worker.md
/// documents every field.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::backends::worker {

struct worker_options {
  std::vector<std::string> argv;      ///< templates: {devices} {vendor} {owner} {stages}
  std::vector<std::pair<std::string, std::string>> env;  ///< values are templates too
  double start_timeout_s = 600;       ///< start to hello (imports; the model loads later)
  double stop_grace_s = 10;           ///< shutdown/SIGTERM -> SIGKILL
  double cancel_grace_s = 5;          ///< cancel -> kill, when its result does not come
  double health_interval_s = 30;      ///< ping an idle worker this often; 0 = never
  double health_timeout_s = 10;       ///< its pong must come within this
  int max_restarts = 5;               ///< more exits than this within restart_period_s:
  double restart_period_s = 300;      ///<   it gives up
  std::vector<std::string> capacity_patterns;  ///< built-in ones + these (a death's log)
  std::string log_dir;                ///< "" = exec::default_log_dir(work dir)
  uint32_t fps = 24;
  uint32_t frame_offset = 1;
};

/// The placeholders argv and env may hold.
const std::vector<std::string>& worker_placeholders();

/// Reads the options of backend `name`. Throws config::config_error at
/// "/backends/<name>/options/..." naming what is wrong.
worker_options parse_worker_options(const std::string& name, const nlohmann::json& options);

} // namespace vidline::backends::worker
