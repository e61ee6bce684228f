#pragma once
/// The interface between vidline's actors and whatever does the GPU work: `sim`
/// (deterministic, time-scaled), `exec` (any command, one process per stage), `worker` (a long-lived
/// process of the user's that keeps its model loaded), `comfyui` (its HTTP API).
///
/// Calls block and run on a worker thread of their own, never on the actor scheduler.
/// Each call may be cancelled through its `stage_env::cancel` flag and must then return
/// promptly with outcome "transient" and error "cancelled".

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "config/config.hpp"
#include "messages/messages.hpp"

namespace vidline::backends {

/// Where and how one stage attempt runs.
struct stage_env {
  std::string work_dir;               ///< private to this attempt; exists; may be wiped after
  std::string output_path;            ///< where the stage must leave its product
                                      ///< (sample: the latent; decode: the video file)
  std::vector<std::string> devices;   ///< device indices of the pool/decoder GPUs
  std::string vendor;                 ///< "nvidia" | "amd" | ...
  double timeout_s = 0;               ///< run-clock seconds; 0 = none
  const std::atomic<bool>* cancel = nullptr;
  /// Called (from the stage's thread) as a backend learns how far the stage is: step i of
  /// n (a sampler's denoising steps). May be empty; backends that cannot tell never call it.
  std::function<void(uint32_t step, uint32_t steps)> progress;
  // -- sampling checkpoints (docs/reliability.md, "Checkpoints"; samplers only) ------------
  /// A folder private to the attempt where the sampler writes each checkpoint file before
  /// handing it to `checkpoint` ("" = the owner takes none: do not checkpoint).
  std::string checkpoint_dir;
  /// Run-clock seconds between checkpoints (knob checkpoint_interval_s): saved at the first
  /// step boundary this long after the previous one (or the start). 0 = none.
  double checkpoint_interval_s = 0;
  /// Hands a checkpoint over: the state after `step` of `steps` steps, in `file` (inside
  /// checkpoint_dir). Blocks until the owner made it durable (hashed, fsynced, moved into
  /// the latent store: the file is gone after). Called from the stage's thread. Returns
  /// false when it could not (the sampler goes on; the next checkpoint may).
  std::function<bool(uint32_t step, uint32_t steps, const std::string& file)> checkpoint;
  /// Go on from a checkpoint: `resume_file` (verified against its digest by the owner) holds
  /// the state after `resume_step` steps. 0 / "" = from the start. A sampler that cannot
  /// resume starts from 0; its latent must equal an uninterrupted one's either way.
  uint32_t resume_step = 0;
  std::string resume_file;
  std::string resume_sha256;          ///< resume_file's digest (lowercase hex)
  /// Set by the owner to ask the sampler to save a checkpoint at its next step and return
  /// outcome "preempted" (msg::outcome::preempted). A sampler that cannot checkpoint ignores
  /// it. May be null.
  const std::atomic<bool>* preempt = nullptr;
};

/// How a stage attempt ended. `outcome` is one of msg::outcome.
struct stage_result {
  std::string outcome = msg::outcome::fatal;
  std::string error;
  std::string sha256;                 ///< digest of the product at output_path
  uint64_t bytes = 0;                 ///< size of the product
  double elapsed_s = 0;               ///< run-clock seconds the stage took
  bool cold = false;                  ///< the model had to be loaded first
  /// The model the backend had loaded for it: its key and an identity that changes when its
  /// weights change; "" = the backend cannot tell (msg::sample_result::model_identity).
  std::string model;
  std::string model_identity;
};

/// A load before the first stage (config backend `warm_start`): for a pool the model of its
/// backend's default workflow, for a decoder the cluster's default workflow's model (the
/// key its first decode most likely names), for an encoder none named (its one model), on
/// the owner's devices.
struct warm_request {
  std::string workflow;
  std::string model;
  stage_env env;                      ///< devices, vendor, work_dir (output_path unused)
};

/// How a warm start ended. `warmed` false: nothing is loaded yet (the backend cannot warm,
/// the worker does not take load requests, the load failed: `error` says which); the first
/// job then loads the model as it always did.
struct warm_result {
  bool warmed = false;
  std::string model;
  std::string model_identity;
  double load_s = 0;
  std::string error;
};

/// Text-encoder backend: conditioning for a prompt, written to env.output_path.
class encoder_backend {
public:
  virtual ~encoder_backend() = default;
  virtual stage_result encode(const std::string& prompt, const stage_env& env) = 0;
  /// Loads its model now, before any prompt: as sampler_backend::warm.
  virtual warm_result warm(const warm_request& w) {
    (void)w;
    return {};
  }
};

/// Sampler backend: a job's latent, written to env.output_path.
class sampler_backend {
public:
  virtual ~sampler_backend() = default;
  virtual stage_result sample(const msg::job_spec& job, const std::string& conditioning_path,
                              const stage_env& env) = 0;
  /// Loads `w.model` now, before any job asks for it. Blocks; called at most once, from a
  /// worker thread, before the first sample. Backends that cannot: not warmed, no error.
  virtual warm_result warm(const warm_request& w) {
    (void)w;
    return {};
  }
  /// The model it holds loaded now (key, identity); nullopt = it cannot tell. Thread-safe.
  virtual std::optional<std::pair<std::string, std::string>> loaded_model() const {
    return std::nullopt;
  }
  /// Whether every sample reports its steps through env.progress, the first one within a
  /// model's load and one step: a silent one is hung (the pool's progress watchdog). false
  /// = it may not; the pool then watches only the workflows it has seen report steps.
  virtual bool reports_steps() const { return false; }
};

/// Decoder backend: a job's video file, written atomically to env.output_path, only after
/// the latent at `latent_path` hashed to `latent_sha256`.
class decoder_backend {
public:
  virtual ~decoder_backend() = default;
  virtual stage_result decode(const msg::job_spec& job, const std::string& latent_path,
                              const std::string& latent_sha256, const stage_env& env) = 0;
  /// Loads `w.model` now, before any latent: as sampler_backend::warm.
  virtual warm_result warm(const warm_request& w) {
    (void)w;
    return {};
  }
};

/// What a backend instance serves: the config entry plus the profile key of the pool,
/// decoder or encoder that owns it (for sim timing and capacity).
struct backend_params {
  config::backend backend;
  std::string profile_key;
  std::string owner;                  ///< pool/decoder/encoder name, for logs
  std::string host;                   ///< the owner's host
  std::vector<std::string> gpus;      ///< the GPU ids of that host the owner uses
  uint64_t log_file_bytes = 10u << 20;  ///< a backend process's log rotates past this
  int log_files = 5;                    ///< rotated logs kept beside it
};

std::unique_ptr<encoder_backend> make_encoder(const backend_params& p);
std::unique_ptr<sampler_backend> make_sampler(const backend_params& p);
std::unique_ptr<decoder_backend> make_decoder(const backend_params& p);

} // namespace vidline::backends
