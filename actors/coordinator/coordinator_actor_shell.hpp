#pragma once
/// The coordinator shell's parts (coordinator_actor.cpp holds the behavior): its state, the
/// step that journals before it sends (coordinator_actor_shell.cpp), and the client
/// requests: submits (coordinator_actor_submit.cpp), and cancel, status, runs, resume,
/// review and drain (coordinator_actor_runs.cpp). Internal to the coordinator.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/context.hpp"
#include "actors/coordinator/gpu_view.hpp"
#include "actors/coordinator/input_maker.hpp"
#include "actors/coordinator/journal.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "messages/gpu.hpp"

namespace vidline::actors::coordinator {

struct shell {
  context ctx;
  std::shared_ptr<journal> jnl;
  state st;
  clock_note clock;
  /// The state's counters as last put in the registry (its counters take the growth).
  uint64_t forgotten_seen = 0, unknown_seen = 0, reused_seen = 0;
  double gpu_s_seen = 0;  ///< state::gpu_s_redone at the last look
  /// The forgotten run read last from the journal: a client reading a big one page by page
  /// reads the journal once. A forgotten run does not change; the copy goes when its
  /// records are dropped or it is resumed (back in the state).
  std::optional<run> recent;
  gpu_view gpus;  ///< every host's newest GPU report
  /// Makes the inputs of shots that follow shots; a real video's off this actor's thread.
  /// Last: destroyed first, so its thread ends before the rest of the shell goes.
  std::unique_ptr<input_maker> maker;
};

/// Executes effects: everything to persist goes to the journal in one transaction first,
/// then messages leave. A journal failure throws: the supervisor restarts the coordinator,
/// which reloads the journal, and nothing unrecorded was sent.
void execute(shell& sh, const std::vector<effect>& fx);

/// Jobs and runs by state, hosts up: read off the state each tick (docs/metrics.md).
void observe(const shell& sh);

/// Counters of the state since the last look (observe's counterpart for counters).
void count(shell& sh);

/// A run the state no longer holds (forgotten, docs/reliability.md "Retention"), as the
/// journal recorded it; nullopt when it has none. `error` says why a read failed.
std::optional<run> from_journal(shell& sh, const std::string& run_id, std::string& error);

/// Steps the scheduler and executes its effects; the machine's answer to a submit or an
/// add of jobs (fx_accepted), when it gave one. `answers` (if given) gets the effects that
/// answer a client's request (fx_submit_answer, fx_add_jobs_answer).
std::optional<fx_accepted> handle(shell& sh, const event& e,
                                         std::vector<effect>* answers = nullptr);

std::string new_run_id(const context& ctx);

// -- client requests: coordinator_actor_submit.cpp -------------------------------------------

msg::submit_reply submit(shell& sh, const msg::submit_run& req);

/// `vidline submit RUN ...`: jobs added to an open run, checked as a run's submit is (both
/// admitted by the machine: ev_submit_request, ev_add_jobs_request).
msg::submit_jobs_reply add_jobs(shell& sh, const msg::submit_jobs& req);

// -- client requests: coordinator_actor_runs.cpp ---------------------------------------------

/// `vidline cancel RUN [--job I]`.
msg::cancel_reply cancel(shell& sh, const msg::cancel_run& req);

msg::status_reply status(shell& sh, const std::string& run_id, status_page page);

/// `vidline runs`: the runs in memory and, beside them, those only the journal holds.
msg::runs_reply runs(shell& sh, bool all);

/// `vidline resume RUN`: a forgotten run is recalled from the journal (when it has failed
/// jobs and was not cancelled) and resumed.
msg::resume_reply resume(shell& sh, const std::string& run_id);

/// A reviewer's verdict (review_take): recorded by the machine, which adds the take a
/// reject asks for and sends the verdict to the run index on the video's host (verdicts.hpp);
/// a run the state forgot comes back from the journal.
msg::review_reply review(shell& sh, const msg::review_take& req);

/// `vidline drain` / `undrain`: the machine takes the pool, decoder or host out of dispatch
/// (or puts it back); the effects are executed before the answer is returned.
msg::drain_reply drain(shell& sh, const msg::drain_request& req);

} // namespace vidline::actors::coordinator
