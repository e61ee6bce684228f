#pragma once
/// The encoder actor: conditioning for a prompt, cached by prompt hash on disk (a cached
/// prompt costs nothing, across restarts too). One encode at a time; requests for a prompt
/// already being encoded wait for that encode. Answers `encode_request` with
/// `encode_reply` through a response promise.

#include <caf/event_based_actor.hpp>

#include "actors/context.hpp"

namespace vidline::actors {

caf::behavior encoder_actor(caf::event_based_actor* self, context ctx, config::encoder enc);

} // namespace vidline::actors
