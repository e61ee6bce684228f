#pragma once
/// The decoder actor: the CAF shell around decoder::step. Pulls each ordered latent from
/// its sampling host through the data plane, decodes it through its backend on a worker
/// thread, and reports `decoder_status` (credits included) to the coordinator.

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/context.hpp"
#include "messages/actor_types.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::actors::decoder {

/// The decoder's contract: every message it handles, each with who sends it. It answers
/// none (its results and status go to the coordinator through the bus). The compiler
/// checks decoder_actor's handlers against it.
using decoder_role = caf::typed_actor<
  // The coordinator (through the bus): decode this job's latent.
  caf::reacts_to<msg::decode_order>,
  // The coordinator: a result arrived (`discard`: drop its video).
  caf::reacts_to<msg::result_ack>,
  // The coordinator: leases renewed; a video is published only under its lease.
  caf::reacts_to<msg::lease_grant>,
  // The data plane, from its own thread: an ordered latent's pull ended.
  caf::reacts_to<msg::fetch_done>,
  // The coordinator: a reviewer's verdict, for the run index on this host.
  caf::reacts_to<msg::verdict_index>,
  // Its own worker thread: a decode or the warm start ended.
  caf::reacts_to<msg::stage_done>,
  // Itself, every status interval: report decoder_status to the coordinator.
  caf::reacts_to<msg::status_atom>,
  // Chaos tests: fail now, as a crash would (the supervisor restarts it).
  caf::reacts_to<msg::crash_atom>>;

decoder_role::behavior_type decoder_actor(decoder_role::pointer self, context ctx,
                                          config::decoder dec);

} // namespace vidline::actors::decoder
