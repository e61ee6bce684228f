#pragma once
/// The options of an `exec` backend (config `backends.<name>.options`) and the argv
/// templates they hold. docs/backends.md documents every field.
///
/// An argv template is a list of strings; each may hold placeholders `{name}`, replaced
/// by plain text (no shell ever sees it, so no quoting is needed or done); `{{` and `}}`
/// stand for literal braces. A placeholder a stage does not have is a config error.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::backends::exec {

/// The command of one stage.
struct stage_command {
  std::vector<std::string> argv;                             ///< templates
  std::vector<std::pair<std::string, std::string>> env;      ///< values are templates
  double timeout_s = 0;          ///< real seconds; 0 = the stage timeout of the knobs only
};

/// Everything an exec backend entry says.
struct exec_options {
  std::optional<stage_command> encode;   ///< absent: the prompt text is the conditioning
  std::optional<stage_command> sample;
  std::optional<stage_command> decode;
  std::vector<std::pair<std::string, std::string>> env;      ///< for every stage
  std::vector<std::string> capacity_patterns;                ///< built-in ones + these
  std::vector<int> transient_exit_codes{75};                 ///< EX_TEMPFAIL
  std::vector<int> fatal_exit_codes{2, 126, 127};            ///< usage, not executable, not found
  std::string other_exits = "transient";                     ///< "transient" | "fatal"
  double kill_grace_s = 3;       ///< SIGTERM -> SIGKILL on timeout and cancel
  std::string log_dir;           ///< "" = default_log_dir(work dir)
  uint32_t fps = 24;             ///< {frames} = seconds x fps + frame_offset
  uint32_t frame_offset = 1;
};

/// Reads the options of backend `name`. Throws config::config_error at
/// "/backends/<name>/options/..." naming what is wrong.
exec_options parse_exec_options(const std::string& name, const nlohmann::json& options);

/// Placeholders each stage offers.
const std::vector<std::string>& encode_placeholders();
const std::vector<std::string>& sample_placeholders();
const std::vector<std::string>& decode_placeholders();

/// The names of the placeholders in `tmpl`. Throws std::invalid_argument on a malformed
/// template (a lone brace, an empty or invalid name).
std::vector<std::string> placeholders_in(std::string_view tmpl);

/// `tmpl` with every placeholder replaced by its value. Throws std::invalid_argument on a
/// malformed template or a name missing from `values`.
std::string expand(std::string_view tmpl, const std::map<std::string, std::string>& values);

} // namespace vidline::backends::exec
