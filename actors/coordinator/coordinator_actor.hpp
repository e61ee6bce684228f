#pragma once
/// The coordinator actor: the CAF shell around sched::step. Owns the run journal, turns
/// status reports, results, peer events and client requests into events, and executes the
/// effects in order (journal first, then messages).

#include <memory>

#include <caf/event_based_actor.hpp>

#include "actors/context.hpp"
#include "actors/coordinator/input_maker.hpp"
#include "actors/coordinator/journal.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "actors/coordinator/submit_checks.hpp"  // check_submit, check_queue, max_priority

namespace vidline::actors {


/// Rebuilds the pool/decoder bookkeeping of jobs that were in flight when the journal was
/// written (after a coordinator restart); their orders are resent if the pools do not
/// show them within order_resend_s. Their leases start afresh at monotonic `mono`: a
/// worker may have been granted one just before the restart.
void adopt_in_flight(sched::state& s, double now, double mono);

/// How the coordinator's input maker pulls files of other hosts (input_maker.hpp): `video`
/// a video to take a frame of it, `latent` a latent handed over to a shot that continues
/// from it. Empty: only files on this host are taken.
struct input_fetchers {
  video_fetch video;
  video_fetch latent;
};

caf::behavior coordinator_actor(caf::event_based_actor* self, context ctx,
                                std::shared_ptr<journal> jnl, input_fetchers fetch);

} // namespace vidline::actors
