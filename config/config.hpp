#pragma once
/// The cluster config: what hosts, GPUs, pools, decoders and modes a line has, and every
/// knob. Loaded from one JSON file; `docs/config.md` documents each field.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/knobs.hpp"
#include "config/workflow.hpp"

namespace vidline::config {

/// One GPU of a host.
struct gpu {
  std::string id;          ///< unique within its host, e.g. "t10-0"
  std::string model;       ///< e.g. "Tesla T10"
  std::string vendor;      ///< "nvidia" | "amd" | "intel" | "cpu"
  double memory_gib = 0;
  int index = 0;           ///< device index as the vendor's runtime numbers it
};

/// A node's HTTP endpoint (docs/http.md): `/metrics` on every node; the API (`/v1/...`)
/// and the dashboard on the coordinator's. Off while `port` is 0 (the default).
struct http_endpoint {
  std::string address = "127.0.0.1";  ///< what it binds; loopback unless a token guards it
  int port = 0;                       ///< 0 = no HTTP endpoint on this host
  /// A file holding the bearer token every request must present (absolute after loading;
  /// "" = none). Required when `address` is not loopback.
  std::string token_file;
  uint64_t max_request_bytes = 1 << 20;  ///< larger request bodies get 413
};

/// One host: one `vidline node` process.
struct host {
  std::string name;
  std::string address;     ///< IP or DNS name the other nodes reach it at
  int port = 0;            ///< the node's ZeroMQ ROUTER port (bus)
  /// The port of its bulk channel (docs/security.md, "Bulk transfers"), 0 = none. Between
  /// two hosts that both have one, latents travel unencrypted (their digests on the
  /// CURVE link, every byte checked); otherwise on the CURVE link itself.
  int bulk_port = 0;
  std::string data_dir;    ///< absolute after loading: latents/, outputs/, journal/, logs/
  std::vector<gpu> gpus;
  /// The host's CURVE public key (Z85, 40 characters; `vidline keygen`). Required unless
  /// the cluster is `plaintext`. Only connections presenting a listed key are admitted.
  std::string public_key;
  /// Its secret key file, absolute after loading (default <data_dir>/keys/<name>.key).
  /// Read by that host's node, and by the CLI on a host that can read it.
  std::string secret_key_file;
  http_endpoint http;      ///< its HTTP endpoint ("http"; off by default)
  /// Where this host's node collects every run's finished videos, one folder per run
  /// (`<collect_dir>/<run id>/`, with its index.jsonl), with no client following the run
  /// (docs/shots.md, "A host that collects"); absolute after loading; "" = none.
  std::string collect_dir;

  /// The GPU with this id, or nullptr.
  const gpu* find_gpu(const std::string& id) const;
};

/// A named backend instance: how a stage's GPU work is done.
struct backend {
  std::string name;
  std::string type;        ///< "sim" | "exec" | "worker" | "comfyui"
  /// sim: real seconds per simulated second (0.01 = 1 simulated second in 10 ms).
  double time_scale = 0.01;
  /// sim: profile file; empty = the embedded reference profile.
  std::string profile;
  nlohmann::json options;  ///< type-specific options (exec, comfyui), validated by the backend
  /// The workflows its pools offer (docs/config.md, "Workflows"); empty = one implicit
  /// default (config::workflows_of).
  std::vector<workflow> workflows;
  /// Whether each pool of it loads the model of the backend's default workflow when its
  /// node starts, before its first job (docs/config.md); unset = on for `worker`, off
  /// for the others (only `worker` can). warm_start_of says which holds.
  std::optional<bool> warm_start;
};

/// `b.warm_start`, its default applied.
inline bool warm_start_of(const backend& b) { return b.warm_start.value_or(b.type == "worker"); }

/// GPUs of one host that sample together (sequence-parallel).
struct pool {
  std::string name;
  std::string host;
  std::vector<std::string> gpus;  ///< gpu ids of that host
  std::string backend;            ///< name of a backend
  std::string profile_key;        ///< timing/capacity key in the profile, e.g. "t10x8"
};

/// A decoder: one GPU that decodes latents and muxes the video file.
struct decoder {
  std::string name;
  std::string host;
  std::string gpu;
  std::string backend;
  std::string profile_key;        ///< e.g. "rtx3080ti"
};

/// The text encoder of one sampling host (conditioning, cached by prompt hash).
struct encoder {
  std::string name;
  std::string host;
  std::vector<std::string> gpus;
  std::string backend;
  std::string profile_key;        ///< e.g. "t10x4"
};

/// A named layout: which pools and decoders are active.
struct mode {
  std::string name;
  std::vector<std::string> pools;
  std::vector<std::string> decoders;
  /// How the coordinator hands this mode's jobs to its pools: "in_turn" (job i to pool
  /// i mod n, as the reference line did), "first_free" or "auto" (docs/planner.md).
  std::string policy = "in_turn";
};

/// A "profile" the config spelled with a kind's old name (config/profile/kinds.hpp): it
/// loads as the kind's current name; preflight names each, so the file can be updated.
struct old_profile_key {
  std::string path;      ///< "/pools/3/profile"
  std::string written;   ///< "xtx"
  std::string kind;      ///< "rx7900xtx"
};

/// The whole cluster.
struct cluster {
  std::string name;
  std::string coordinator;        ///< host name that runs the coordinator
  std::vector<host> hosts;
  std::map<std::string, backend> backends;
  std::vector<pool> pools;
  std::vector<decoder> decoders;
  std::vector<encoder> encoders;
  std::vector<mode> modes;
  config::knobs knobs;
  /// Links without CURVE: allowed only when every host's address is loopback.
  bool plaintext = false;
  std::string source_path;        ///< the file it was loaded from
  /// Profile keys written with a kind's old name, read as its current one (not written
  /// back by to_json, which writes the current names).
  std::vector<old_profile_key> old_profile_keys;

  const host* find_host(const std::string& name) const;
  const pool* find_pool(const std::string& name) const;
  const decoder* find_decoder(const std::string& name) const;
  const encoder* find_encoder(const std::string& name) const;
  const encoder* find_encoder_of_host(const std::string& host) const;
  const mode* find_mode(const std::string& name) const;
  const backend* find_backend(const std::string& name) const;
};

/// A config that could not be accepted. `path` names the field, JSON-pointer style
/// ("/pools/2/host"); it is "" for errors of the file as a whole (missing, unreadable,
/// not JSON). `what()` reads "<path>: <message>", or just the message when path is "".
class config_error : public std::runtime_error {
public:
  config_error(std::string path, const std::string& message);
  const std::string& path() const noexcept { return path_; }
  const std::string& message() const noexcept { return message_; }

private:
  std::string path_;
  std::string message_;
};

/// Parses and validates a config from JSON text. `base_dir` resolves relative paths
/// (data_dir, a sim backend's profile); "" = the working directory. Profile keys left out
/// are derived (default_profile_key). Throws config_error naming the first field that is wrong.
cluster parse(const std::string& text, const std::string& base_dir);

/// Reads, parses and validates a config file. Throws config_error (path "" for I/O).
cluster load(const std::string& file);

/// The config as JSON (round-trips through parse).
nlohmann::json to_json(const cluster& c);

/// The config's digest: SHA-256 (64 lowercase hex digits) of to_json(c) dumped compact,
/// keys sorted. Layout, key order, comments and left-out defaults do not change it; any
/// value that differs does. Nodes announce it in their hello and refuse a peer started
/// from another config (messages/PROTOCOL.md, "heartbeat").
std::string digest(const cluster& c);

/// Whether `address` (a host's "address") is loopback: 127.0.0.0/8 as a dotted quad,
/// "::1" or "localhost".
bool is_loopback_address(const std::string& address);

/// Whether `key` looks like a Z85 CURVE key: 40 characters of the Z85 alphabet.
bool is_z85_key_text(const std::string& key);

/// Checks a cluster by every rule `parse` applies after reading (names, references,
/// ranges, GPU sharing within a mode, knobs), e.g. one a test built in code.
/// Throws config_error naming the first field that is wrong.
void validate(const cluster& c);

/// Knobs from the JSON object of the config's "knobs" member: the defaults, overridden by
/// the members present, then validated. Errors name "/knobs/<name>".
config::knobs knobs_from_json(const nlohmann::json& j);

/// Every knob as JSON, by its C++ name; restart policies as {max_restarts, period_s}.
nlohmann::json to_json(const config::knobs& k);

/// Checks every knob against its range and the knobs against each other (e.g.
/// max_frame_bytes >= chunk_bytes + 64 KiB). Throws config_error at "/knobs/<name>".
void validate(const config::knobs& k);

/// The profile key a pool, decoder or encoder gets when its config names none:
/// `model_short` for one GPU, `model_short` + "x" + count for several, where model_short
/// is the model lower-cased, without brand words (Tesla, GeForce, Radeon, ...) and without
/// anything but a-z and 0-9: ("Tesla T10", 8) -> "t10x8", ("RTX 3080 Ti", 1) -> "rtx3080ti",
/// ("RX 7900 XTX", 1) -> "rx7900xtx". These are the kinds' names everywhere: the embedded
/// reference profile's, and those `vidline profile build` learns (config/profile/kinds.hpp).
/// "" when the model leaves nothing.
std::string default_profile_key(const std::string& model, std::size_t gpu_count);

} // namespace vidline::config
