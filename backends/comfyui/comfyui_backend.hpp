#pragma once
/// The `comfyui` backend: each stage renders its workflow template (template.hpp) and runs
/// it on a ComfyUI server through its HTTP API (client.hpp).
///
/// One attempt, in order:
///  1. its prompt id: a UUID derived from the attempt (owner, stage, run, job, attempt id =
///     the work directory's name, seed, size, prompt), so the same attempt always has the
///     same id;
///  2. look for it: GET /history/{id} (it ended before: take its result), else GET /queue
///     (it is still queued or running: wait for it), else POST /prompt. After a crash of
///     the node the resent order finds its earlier prompt instead of running it twice;
///  3. wait: poll /history/{id}; while it is absent, /queue must still hold it, otherwise
///     the server lost it (a restart loses queue and history) and it is submitted again,
///     at most `resubmit_limit` times;
///  4. map the end: success -> fetch outputs; execution_error -> capacity (out-of-memory
///     texts), transient (Ray worker deaths, `transient_patterns`), fatal
///     (`fatal_patterns`) or `other_errors`; execution_interrupted -> transient;
///     400 on submit -> fatal with the node errors; the server unreachable for
///     `unreachable_s` -> transient; the stage timeout or cancel -> POST /interrupt (only
///     when it is ours that runs) and delete it from the queue, transient.
///
/// Sampling: the workflow ends in SaveLatent nodes (`latents`: part -> node id, e.g. video
/// and audio saved separately); their files are fetched (GET /view or the output
/// directory) and bundled into one ustar file (bundle.hpp): the latent the line hands on.
/// Decoding: the bundle's parts are placed as ComfyUI inputs (POST /upload/image or the
/// input directory) under vidline/<prompt id>/<part>.latent, named to the workflow as
/// {{latent_<part>}} for its LoadLatent nodes; the file of node `video_output` is fetched.
/// Encoding: ComfyUI workflows encode the prompt themselves; the encoder hands the
/// prompt text on (exec::make_prompt_encoder).

#include <memory>

#include "backends/backend.hpp"

namespace vidline::backends::comfyui {

/// Instances for a config entry of type "comfyui". Throw config::config_error on bad
/// options (at /backends/<name>/options/...), including a missing workflow the owner needs.
std::unique_ptr<encoder_backend> make_comfyui_encoder(const backend_params& p);
std::unique_ptr<sampler_backend> make_comfyui_sampler(const backend_params& p);
std::unique_ptr<decoder_backend> make_comfyui_decoder(const backend_params& p);

/// The prompt id of an attempt (step 1 above): backend and owner names, the stage
/// ("sample" | "decode"), the job, the attempt's work directory, and `extra` (a decoder
/// passes the latent's digest).
std::string prompt_id_for(const std::string& backend, const std::string& owner,
                          const std::string& stage, const msg::job_spec& job,
                          const std::string& work_dir, const std::string& extra);

} // namespace vidline::backends::comfyui
