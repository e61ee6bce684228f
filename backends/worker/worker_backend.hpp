#pragma once
/// The `worker` backend: each pool, decoder and encoder that uses it owns one long-lived
/// worker process (worker_process.hpp), the user's program, which loads its model once and
/// answers stage requests over the worker protocol (protocol.hpp, docs/worker.md) while
/// the model stays in memory.
///
/// For each attempt: the prompt is written to <work_dir>/prompt.txt; the request names the
/// stage, the job, the input files and where to leave the product (a file in the work
/// directory); the worker answers progress, then one result. The product of an ok result
/// is checked, hashed and moved to stage_env::output_path exactly as `exec` does
/// (exec::commit_product); a decoder checks the latent's digest before sending anything
/// (exec::check_latent).
///
/// Outcomes: the worker's own class (ok, capacity, transient, fatal) and its cold flag;
/// ok without a product -> fatal; the worker died mid-job -> transient (capacity when its
/// log says out of memory), and the next request goes to its restarted successor; the
/// stage timeout -> transient; cancel -> transient "cancelled"; a worker that breaks the
/// protocol or does not serve the stage -> fatal; a worker that gave up (restart budget
/// spent) -> transient.

#include <memory>

#include "backends/backend.hpp"

namespace vidline::backends::worker {

/// Instances for a config entry of type "worker". Throw config::config_error (at
/// /backends/<name>/options/...) on bad options. The process starts on the first call.
std::unique_ptr<encoder_backend> make_worker_encoder(const backend_params& p);
std::unique_ptr<sampler_backend> make_worker_sampler(const backend_params& p);
std::unique_ptr<decoder_backend> make_worker_decoder(const backend_params& p);

} // namespace vidline::backends::worker
