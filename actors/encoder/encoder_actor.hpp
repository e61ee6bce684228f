#pragma once
/// The encoder actor: conditioning for a prompt, cached by prompt hash on disk (a cached
/// prompt costs nothing, across restarts too). One encode at a time; requests for a prompt
/// already being encoded wait for that encode. Answers `encode_request` with
/// `encode_reply` through a response promise.

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/context.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors::encoder {

/// The encoder's contract: every message it handles, each with who sends it, and what it
/// answers. The compiler checks encoder_actor's handlers against it.
using encoder_role = caf::typed_actor<
  // A pool, before it samples a job: the prompt's conditioning (cached or encoded now).
  caf::replies_to<msg::encode_request>::with<msg::encode_reply>,
  // Its own worker thread: an encode or the warm start ended.
  caf::reacts_to<msg::stage_done>,
  // Chaos tests: fail now, as a crash would (the supervisor restarts it).
  caf::reacts_to<msg::crash_atom>>;

encoder_role::behavior_type encoder_actor(encoder_role::pointer self, context ctx,
                                          config::encoder enc);

} // namespace vidline::actors::encoder
