#pragma once
/// The options of a `comfyui` backend (config `backends.<name>.options`). docs/backends.md
/// documents every field.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"

#include "backends/comfyui/client.hpp"

namespace vidline::backends::comfyui {

/// A backend process the pool or decoder owns (started, watched and stopped by it).
struct process_options {
  std::vector<std::string> argv;      ///< templates: {port} {host} {base_dir} {input_dir}
                                      ///< {output_dir} {temp_dir} {user_dir} {database}
                                      ///< {runtime_dir} {devices}
  std::vector<std::pair<std::string, std::string>> env;  ///< values are templates too
  std::string base_dir;               ///< absolute; its own input/output/temp/user/db live here
  std::string runtime_dir;            ///< short; "" = /tmp/vl-<hash of base_dir>
  double start_timeout_s = 300;       ///< until it answers GET /system_stats
  int max_restarts = 5;               ///< restart intensity, as the knobs' restart policies
  double restart_period_s = 30;
  double stop_grace_s = 10;           ///< SIGTERM -> SIGKILL on stop
};

struct comfyui_options {
  endpoint server;                    ///< from "url"
  std::string url;
  std::optional<nlohmann::json> sample_workflow;   ///< the template, loaded
  std::optional<nlohmann::json> decode_workflow;
  /// A sample template per declared workflow (its `template`), by workflow name; a job of a
  /// workflow without one uses sample_workflow.
  std::map<std::string, nlohmann::json> workflow_templates;
  std::map<std::string, std::string> latents;      ///< part -> SaveLatent node id
  std::string video_output;                        ///< node id whose output is the video
  double poll_interval_s = 0.5;
  double unreachable_s = 120;         ///< server silent this long: the attempt gives up
  int resubmit_limit = 1;             ///< a prompt the server lost is submitted again
  std::string outputs_from = "view";  ///< "view" | "directory"
  std::string output_dir;             ///< ComfyUI's output directory ("directory")
  std::string inputs_to = "upload";   ///< "upload" | "directory"
  std::string input_dir;              ///< ComfyUI's input directory ("directory")
  uint32_t fps = 24;
  uint32_t frame_offset = 1;
  std::string negative_prompt;
  std::vector<std::string> capacity_patterns;      ///< built-in ones + these
  std::vector<std::string> transient_patterns{"RayActorError", "ActorDiedError",
                                              "ActorUnavailableError"};
  std::vector<std::string> fatal_patterns;
  std::string other_errors = "transient";          ///< "transient" | "fatal"
  std::optional<process_options> process;
};

/// Reads the options of backend `name`, loading workflow files and checking them (API
/// format; only known placeholders; the latents / video_output nodes exist). Throws
/// config::config_error at "/backends/<name>/options/...".
comfyui_options parse_comfyui_options(const std::string& name, const nlohmann::json& options);

/// Loads the sample template of each of `b`'s declared workflows that names one, checked as
/// sample_workflow is (shot placeholders {{param.NAME}} / {{input.NAME}} allowed). Throws
/// config::config_error at "/backends/<name>/workflows/<i>/template".
void load_workflow_templates(const config::backend& b, comfyui_options& o);

/// Placeholders the sample and decode workflows may use (`latent_<part>` in the decode
/// workflow for each part a sampler saved).
const std::vector<std::string>& sample_workflow_placeholders();
const std::vector<std::string>& decode_workflow_placeholders();

} // namespace vidline::backends::comfyui
