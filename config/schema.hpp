#pragma once
/// The rules of the config schema that both the JSON reader and the validator apply.
/// Internal to config/.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"

namespace vidline::config::detail {

constexpr int port_min = 1;
constexpr int port_max = 65535;
constexpr int gpu_index_max = 1023;
/// Bounds of a host's http.max_request_bytes.
constexpr int64_t http_request_bytes_min = 1024;
constexpr int64_t http_request_bytes_max = int64_t{1} << 30;
/// Longest name of a host, GPU, backend, pool, decoder, encoder or mode. Names end up in
/// file and socket paths, which must stay short (docs/reference.md, lessons).
constexpr std::size_t name_max = 64;

/// The GPU vendors a `gpu.vendor` may name.
const std::vector<std::string>& vendors();

/// The backend types a `backend.type` may name.
const std::vector<std::string>& backend_types();

/// The dispatch policies a `mode.policy` may name (actors::coordinator::policy_names, which config/
/// cannot include).
const std::vector<std::string>& dispatch_policies();

/// Throws config_error at `path` unless `name` is 1-64 characters of [A-Za-z0-9_.-] not
/// starting with '.' or '-'.
void check_name(const std::string& name, const std::string& path);

/// Throws config_error at `path` unless `value` is one of `allowed`; `what` names the
/// field in the message ("vendor", "backend type").
void check_one_of(const std::string& value, const std::vector<std::string>& allowed,
                  const std::string& path, const std::string& what);

/// Builds a cluster from a parsed document, checking its shape: known keys only, required
/// fields present, every value of the right type. Relative data_dir and sim profile paths
/// are resolved against `base_dir` (empty: the working directory). Profile keys the
/// document leaves out stay empty; see fill_default_profiles.
cluster read_cluster(const nlohmann::json& doc, const std::string& base_dir);

/// Reads a backend's "workflows" array at `path` (names, model keys, params, inputs, the
/// default, comfyui templates resolved against `base_dir`) and checks it.
std::vector<workflow> read_workflows(const nlohmann::json& j, const std::string& path,
                                     const std::string& base_dir, const std::string& type);

/// The JSON of a backend's declared workflows (round-trips through read_workflows).
nlohmann::json workflows_to_json(const std::vector<workflow>& ws);

/// Reads the "knobs" object at `path` over the defaults; checks types, not ranges.
knobs read_knobs(const nlohmann::json& j, const std::string& path);

/// Gives each pool, decoder and encoder without a profile key the one derived from its
/// GPUs (default_profile_key). Entries whose host or GPUs do not resolve are left for
/// validate() to report; GPUs of different models are an error, as no key fits them.
void fill_default_profiles(cluster& c);

} // namespace vidline::config::detail
