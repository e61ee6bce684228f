#pragma once
/// A pool's checkpoints on disk (docs/reliability.md, "Checkpoints"): each file a sampler
/// saves is hashed, fsynced and moved into the host's latent store under its SHA-256
/// (`<sha256>.latent`), beside a note naming its job, step and attempt, so the latents
/// actor reports it, the coordinator releases it once the job's latent is made, and any
/// host pulls it by digest as it pulls a latent. The shell side of pool_machine's
/// checkpoints: files and fetches only.
///
/// Failures handled: a checkpoint file missing or unreadable (not saved, the sampler goes
/// on); a local copy whose digest is not its name (removed; reported bad); a pull refused
/// or corrupt (reported bad: the coordinator drops it and uses the one before); a pull
/// that cannot reach its host (the attempt starts from step 0).

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "actors/context.hpp"
#include "messages/messages.hpp"

namespace vidline::actors::pool {

/// The note beside a checkpoint in the latent store: "<run> <index> checkpoint <step>
/// <attempt>" (a latent's note is "<run> <index>").
std::string checkpoint_note(const std::string& run_id, uint32_t index, uint32_t step,
                            uint64_t attempt);

/// Moves the checkpoint at `file` (saved by `attempt` of job `run_id`/`index` after `step`
/// of `steps`) into the latent store, durable. nullopt when the file cannot be read or
/// moved (logged; nothing is left half-stored).
std::optional<msg::checkpoint_ref> store_checkpoint(const context& ctx,
                                                    const std::string& run_id, uint32_t index,
                                                    uint64_t attempt, uint32_t step,
                                                    uint32_t steps, const std::string& file);

/// How make_resume_file ended.
struct resume_file {
  std::string path;          ///< the verified checkpoint on this host ("" = start from 0)
  std::string bad;           ///< its digest when it did not verify anywhere
  std::string note;          ///< why it starts from 0 or is bad ("" = resumed)
};

/// Makes the order's resume checkpoint present and verified in this host's latent store:
/// the local copy, else pulled from `c.host` by digest. Blocks the calling (worker) thread
/// until done or `*cancel` is set.
resume_file make_resume_file(const context& ctx, const msg::job_spec& job,
                             const msg::checkpoint_ref& c, const std::atomic<bool>* cancel);

} // namespace vidline::actors::pool
