#pragma once
/// The sim sampler's checkpoints (docs/sim-contract.md, "Checkpoints"). The sim samples in
/// `sim_steps` equal steps after the model's load; its state after step s is a chain of
/// digests over the job's latent fingerprint, so a checkpoint names its job and its step
/// and a resumed attempt can tell a checkpoint of another job or a damaged one (it then
/// starts from step 0). The latent itself is a function of the job alone, so a resumed
/// job's latent is the uninterrupted one's.
///
///     vidline-sim-checkpoint 1
///     job <hex: block(0) of the job's latent>
///     step <s> of <n>
///     state <hex: chain(s)>
///
/// chain(0) = block(0); chain(i) = SHA-256(chain(i - 1) || u32le(i)).

#include <cstdint>
#include <optional>
#include <string>

#include "backends/sim/latent.hpp"

namespace vidline::backends::sim {

/// Steps of every sim sampling stage (its time split evenly among them).
inline constexpr uint32_t sim_steps = 30;

/// The text of the checkpoint after `step` of `steps` of the job whose latent is `key`'s.
std::string checkpoint_text(const latent_key& key, uint32_t step, uint32_t steps);

/// The step a checkpoint's text stands for when it is this job's (of `steps` steps), and
/// its state chain checks; nullopt otherwise (another job's, another step count, damaged).
std::optional<uint32_t> checkpoint_step(const latent_key& key, uint32_t steps,
                                        const std::string& text);

} // namespace vidline::backends::sim
