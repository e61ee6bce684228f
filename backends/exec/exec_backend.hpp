#pragma once
/// The `exec` backend: every stage runs a configured command (exec_options.hpp) as a
/// child process (child.hpp), never through a shell.
///
/// For each attempt: the prompt is written to <work_dir>/prompt.txt (never put on a
/// command line); the command runs in the attempt's work directory, in a process group of
/// its own, with the pool's devices in its environment (stage_util.hpp,
/// device_variables), stdout and stderr in per-job log files; it writes its product to
/// {output} (a file in the work directory), which is checked (present, regular,
/// non-empty), hashed, and moved to stage_env::output_path.
///
/// Outcomes: exit 0 with a product -> ok; exit 0 without one -> fatal (the command is
/// broken, running it again will not help); an out-of-memory text in its output (any exit
/// but 0, or a timeout) -> capacity; a transient exit code -> transient; a fatal exit code
/// or a program that cannot be started -> fatal; any other exit or a signal ->
/// `other_exits` (transient by default); the stage timeout -> transient; cancel ->
/// transient "cancelled". A decoder whose latent does not hash as expected -> corrupt,
/// without running anything.

#include <memory>
#include <string>
#include <string_view>

#include "backends/backend.hpp"
#include "common/spawn/child.hpp"
#include "backends/exec/exec_options.hpp"

namespace vidline::backends::exec {

/// Instances for a config entry of type "exec". Throw config::config_error (at
/// /backends/<name>/options/...) on bad options, including a stage the owner needs but the
/// options lack. An encoder without an `encode` stage hands the prompt text on as the
/// conditioning.
std::unique_ptr<encoder_backend> make_exec_encoder(const backend_params& p);
std::unique_ptr<sampler_backend> make_exec_sampler(const backend_params& p);
std::unique_ptr<decoder_backend> make_exec_decoder(const backend_params& p);

/// How a command that ended without our stopping it is classified.
struct exit_verdict {
  const char* outcome = nullptr;      ///< msg::outcome
  std::string reason;                 ///< e.g. "exit 1", "out of memory (CUDA out of memory)"
};

/// The verdict on a child that exited non-zero or was killed by a signal not ours, given
/// the tail of its output. Pure.
exit_verdict classify_exit(const spawn::child_end& end, std::string_view output_tail,
                           const exec_options& o);

} // namespace vidline::backends::exec
