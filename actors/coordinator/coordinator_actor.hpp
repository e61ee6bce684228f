#pragma once
/// The coordinator actor: the CAF shell around coordinator::step. Owns the run journal, turns
/// status reports, results, peer events and client requests into events, and executes the
/// effects in order (journal first, then messages).

#include <memory>

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/context.hpp"
#include "actors/coordinator/input_maker.hpp"
#include "actors/coordinator/journal.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/coordinator/submit_checks.hpp"  // check_submit, check_queue, max_priority
#include "messages/actor_types.hpp"
#include "messages/gpu_actor_types.hpp"
#include "messages/input_actor_types.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::actors::coordinator {

/// Rebuilds the pool/decoder bookkeeping of jobs that were in flight when the journal was
/// written (after a coordinator restart); their orders are resent if the pools do not
/// show them within order_resend_s. Their leases start afresh at monotonic `mono`: a
/// worker may have been granted one just before the restart.
void adopt_in_flight(state& s, double now, double mono);

/// How the coordinator's input maker pulls files of other hosts (input_maker.hpp): `video`
/// a video to take a frame of it, `latent` a latent handed over to a shot that continues
/// from it. Empty: only files on this host are taken.
struct input_fetchers {
  video_fetch video;
  video_fetch latent;
};

/// The coordinator's contract: every message it handles, each with who sends it, and what
/// it answers. The compiler checks coordinator_actor's handlers against it. A client request
/// comes either from the bus as a client_call (answered on the client's socket) or
/// in-process as a CAF request (answered as the reply); both get the same answer.
using coordinator_role = caf::typed_actor<
  // Pools, decoders and latents stores of every host (through the bus): status reports,
  // results and what each host holds.
  caf::reacts_to<msg::pool_status>,
  caf::reacts_to<msg::decoder_status>,
  caf::reacts_to<msg::sample_result>,
  caf::reacts_to<msg::decode_result>,
  caf::reacts_to<msg::latent_holdings>,
  // A decoder (through the bus): a reviewer's verdict is in its run index.
  caf::reacts_to<msg::verdict_indexed>,
  // The bus: a peer host came up or went down.
  caf::reacts_to<msg::peer_event>,
  // Its input maker, from its own thread: an input of a waiting job is made.
  caf::reacts_to<msg::input_made>,
  // Each host's GPU sampler (through the bus): GPU health and power.
  caf::reacts_to<msg::gpu_report>,
  // Command-line clients, through the bus (answered on the client's socket).
  caf::reacts_to<msg::client_call<msg::drain_request>>,
  caf::reacts_to<msg::client_call<msg::review_take>>,
  caf::reacts_to<msg::client_call<msg::submit_run>>,
  caf::reacts_to<msg::client_call<msg::resume_run>>,
  caf::reacts_to<msg::client_call<msg::cancel_run>>,
  caf::reacts_to<msg::client_call<msg::submit_jobs>>,
  caf::reacts_to<msg::client_call<msg::runs_query>>,
  caf::reacts_to<msg::client_call<msg::status_query>>,
  // The same requests from inside the node (its HTTP API), as CAF requests.
  caf::replies_to<msg::drain_request>::with<msg::drain_reply>,
  caf::replies_to<msg::review_take>::with<msg::review_reply>,
  caf::replies_to<msg::submit_run>::with<msg::submit_reply>,
  caf::replies_to<msg::resume_run>::with<msg::resume_reply>,
  caf::replies_to<msg::cancel_run>::with<msg::cancel_reply>,
  caf::replies_to<msg::submit_jobs>::with<msg::submit_jobs_reply>,
  caf::replies_to<msg::runs_query>::with<msg::runs_reply>,
  caf::replies_to<msg::status_query>::with<msg::status_reply>,
  // Itself, every status interval: the scheduler's tick, metrics.
  caf::reacts_to<msg::tick_atom>,
  // Chaos tests: fail now, as a crash would (the supervisor restarts it).
  caf::reacts_to<msg::crash_atom>>;

coordinator_role::behavior_type coordinator_actor(coordinator_role::pointer self, context ctx,
                                                  std::shared_ptr<journal> jnl,
                                                  input_fetchers fetch);

} // namespace vidline::actors::coordinator
