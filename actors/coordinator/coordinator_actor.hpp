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

namespace vidline::actors {


/// Rebuilds the pool/decoder bookkeeping of jobs that were in flight when the journal was
/// written (after a coordinator restart); their orders are resent if the pools do not
/// show them within order_resend_s. Their leases start afresh at monotonic `mono`: a
/// worker may have been granted one just before the restart.
void adopt_in_flight(sched::state& s, double now, double mono);

/// Why a submit is refused, or "" when it is acceptable.
std::string check_submit(const config::cluster& c, const msg::submit_run& r);

/// Why a submit does not fit beside the runs the coordinator holds (knobs max_runs and
/// max_queued_prompt_bytes, over the unfinished runs of `s`), or "" when it does.
/// `new_run`: the submit opens a run (max_runs counts it); false for jobs added to one.
std::string check_queue(const sched::state& s, const config::knobs& k, const msg::submit_run& r,
                        bool new_run = true);

/// The largest run priority either way (`vidline run --priority N`).
inline constexpr int32_t max_priority = 1000000;

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
