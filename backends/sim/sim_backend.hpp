#pragma once
/// The `sim` backend: encoder, sampler and decoder that do no GPU work but take the
/// profile's time on the scaled clock and produce the contract's files
/// (docs/sim-contract.md). Deterministic given their inputs.
///
/// Failures it reports: a size over the pool kind's capacity -> "capacity" after the
/// profile's fail-after time; cancel -> "transient"/"cancelled"; the stage timeout ->
/// "transient"; an I/O error -> "transient"; a latent that does not hash as expected or a
/// conditioning file of another prompt -> "corrupt"; an invalid job -> "fatal".

#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "config/profile/profile.hpp"

namespace vidline::backends::sim {

// The timing profile the sim backend paces itself by (config/profile/).
using config::profile::capacity_limit;
using config::profile::job_size;
using config::profile::model_state;
using config::profile::profile;
using config::profile::profile_error;

/// How one sim backend instance runs.
struct sim_settings {
  double time_scale = 0.01;   ///< real seconds per run-clock second; >= 0
  std::string profile_key;    ///< pool, encoder or decoder kind in the profile
  std::string owner;          ///< pool/decoder/encoder name, for messages
  /// A sampler's or decoder's host and GPUs. A sampler that starts sampling or a decoder
  /// that starts decoding unloads the models of the samplers of this process sharing one of
  /// its GPUs: their next job is cold (gpu_models.hpp).
  std::string host;
  std::vector<std::string> gpus;
  /// A sampler's steps after the model's load (option `steps`; checkpoint.hpp's sim_steps
  /// unless set): the latent is the same whatever the count, only where a checkpoint can
  /// fall changes.
  uint32_t steps = 30;
};

/// Instances over an already loaded profile. Throw std::invalid_argument when the key is
/// not in the profile or time_scale is negative.
std::unique_ptr<encoder_backend> make_sim_encoder(profile prof, sim_settings settings);
std::unique_ptr<sampler_backend> make_sim_sampler(profile prof, sim_settings settings);
std::unique_ptr<decoder_backend> make_sim_decoder(profile prof, sim_settings settings);

/// Instances for a config entry of type "sim": the profile file it names (or the embedded
/// reference profile), its time_scale, and the owner's profile key. Throw
/// std::runtime_error naming the backend on a bad entry.
std::unique_ptr<encoder_backend> make_sim_encoder(const backend_params& p);
std::unique_ptr<sampler_backend> make_sim_sampler(const backend_params& p);
std::unique_ptr<decoder_backend> make_sim_decoder(const backend_params& p);

/// The exact text of the video file a sim decoder writes for `job` (the contract).
std::string video_file_text(const msg::job_spec& job, const std::string& latent_sha256);

/// The text of the conditioning file a sim encoder writes for a prompt: it names the
/// prompt's SHA-256, so a sampler can tell it was given the right conditioning.
std::string conditioning_file_text(const std::string& prompt);

/// The prompt SHA-256 a conditioning file names; empty when the text is not one.
std::string conditioning_prompt_sha256(const std::string& text);

} // namespace vidline::backends::sim
