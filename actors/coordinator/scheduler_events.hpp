#pragma once
/// The scheduler's vocabulary (scheduler.hpp): the events step() takes and the effects it
/// returns.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/coordinator/scheduler_jobs.hpp"
#include "messages/messages.hpp"
#include "messages/review.hpp"

namespace vidline::actors::coordinator {

// -- events --------------------------------------------------------------------------------

struct ev_submit { run r; };                       ///< a new run (ids and jobs filled in); a request id seen before adds nothing (fx_accepted names that run)
/// A client's submit (`vidline run`, POST /v1/runs) as it came: admitted here (checked
/// against the config, the pools' capacity and the queue's limits, its shots expanded into
/// jobs: stepper_admission.cpp), then submitted as ev_submit; answered by fx_submit_answer.
/// Beside the request, what only the shell learns by I/O, gathered before the step:
/// `run_id`, the id a new run gets; `input_sizes`, the inputs this host holds among those
/// the request names (digest -> bytes; one named and missing is refused); `journal_run`,
/// the run the journal says request id `req.request_id` made (a run the state forgot).
struct ev_submit_request {
  msg::submit_run req;
  std::string run_id;
  std::map<std::string, uint64_t> input_sizes;
  std::optional<std::string> journal_run;
};
struct ev_pool_status { msg::pool_status s; };
struct ev_decoder_status { msg::decoder_status s; };
struct ev_sample_result { msg::sample_result r; };
struct ev_decode_result { msg::decode_result r; };
struct ev_peer { std::string host; bool up = false; };
struct ev_tick {};                                 ///< time passed: resends, waits
/// The user asks to finish a run's failed jobs (`vidline resume`): each failed job goes
/// back to decoding when its latent is known (a latent gone is sampled again), else to
/// sampling, with fresh attempt budgets. Capacity limits learned are kept.
/// A run no longer in the state (forgotten, params::finished_run_memory_s) is resumed from
/// `recalled`, its records as the journal holds them: it comes back when it has failed jobs
/// and was not cancelled, behind the runs in the state.
struct ev_resume { std::string run_id; std::optional<run> recalled; };
/// A host's latents actor reports the latents it holds: those no unfinished job needs are
/// released; one sampled for a job that waits for a latent again is adopted (re-offer).
struct ev_latent_holdings { msg::latent_holdings h; };
/// The user stops a run (`job` unset) or one of its jobs (`vidline cancel RUN [--job I]`):
/// every unfinished one becomes `cancelled` (journaled); a stage in flight is ended and its
/// worker told to stop it now (lease_grant::cancelled); a latent of it is released.
struct ev_cancel { std::string run_id; std::optional<uint32_t> job; };
/// The user adds jobs to an open run (`vidline submit RUN ...`): indexes from the run's
/// size on (filled in here; run_id set), queued behind the run's others.
/// Jobs added to an open run (`vidline submit RUN`); a request id seen before for this run
/// adds nothing again (a retried submit).
struct ev_add_jobs { std::string run_id; std::vector<job> jobs; std::string request_id; };
/// A client's jobs for an open run (`vidline submit RUN`) as they came: admitted as a run's
/// submit is (stepper_admission.cpp), then added as ev_add_jobs; answered by
/// fx_add_jobs_answer. `input_sizes` as ev_submit_request's; for a run the state does not
/// hold, `recalled` is the journal's record of it (from_journal) or `recall_error` why it
/// could not be read.
struct ev_add_jobs_request {
  msg::submit_jobs req;
  std::map<std::string, uint64_t> input_sizes;
  std::optional<run> recalled;
  std::string recall_error;
};
/// A reviewer's verdict on job `index`'s video ("accept" | "reject"), answered by
/// fx_review_answer. A reject with `another_take` adds a take of the job's shot with the
/// shot's next seed, as ev_add_jobs adds jobs; a finished run opens again for it (one no
/// longer in the state comes back from `recalled`, as ev_resume's does). Asked again, a
/// reject adds no second take: the answer names the first.
struct ev_review {
  std::string run_id;
  uint32_t index = 0;
  std::string verdict;
  bool another_take = false;
  std::optional<run> recalled;
};
/// `vidline drain` / `undrain` (`drain` false): a pool, a decoder, or every pool and
/// decoder of a host (`kind` "pool" | "decoder" | "host"). Answered by fx_drain_answer.
struct ev_drain { std::string kind; std::string name; bool drain = true; std::string reason; };
/// A card's health as its node reported it (level-triggered; only a change acts): sick
/// drains `users` ("pool:NAME" / "decoder:NAME", the config's users of the card), healthy
/// takes the card off their drains.
struct ev_gpu_health {
  std::string gpu;                  ///< "host/index"
  bool sick = false;
  std::string reason;
  std::vector<std::string> users;
};

/// The shell made (or could not make: `error`) input `name` of a waiting job from its
/// source's video (fx_make_input): stored as an input by its SHA-256.
struct ev_input_made { std::string run_id; uint32_t index = 0; std::string name;
                       std::string sha256; uint64_t bytes = 0; std::string error; };
/// The decoder that made a job's video answered its verdict_index (verdicts.hpp).
struct ev_verdict_indexed { msg::verdict_indexed a; };
/// Power readings of cards (a node's gpu_report): each at its node's wall-clock time.
struct ev_gpu_power {
  struct reading {
    std::string gpu;                ///< "host/gpu id"
    double unix_s = 0;
    double power_w = -1;
  };
  std::vector<reading> readings;
};

using event = std::variant<ev_submit, ev_pool_status, ev_decoder_status, ev_sample_result,
                           ev_decode_result, ev_peer, ev_tick, ev_resume, ev_latent_holdings,
                           ev_cancel, ev_add_jobs, ev_drain, ev_gpu_health, ev_input_made,
                           ev_review, ev_gpu_power, ev_verdict_indexed, ev_submit_request,
                           ev_add_jobs_request>;

// -- effects -------------------------------------------------------------------------------

struct fx_persist_job { std::string run_id; uint32_t index = 0; };
struct fx_persist_run { std::string run_id; };
struct fx_send_sample { std::string host; msg::sample_order order; };
struct fx_send_decode { std::string host; msg::decode_order order; };
struct fx_ack { std::string host; std::string target; uint64_t attempt = 0;
                bool discard = false; };  ///< discard: its product lost the race, remove it
/// The answer to a status report: which of its attempts hold a lease.
struct fx_grant { std::string host; std::string target; msg::lease_grant grant; };
struct fx_job_final { std::string run_id; uint32_t index = 0; };  ///< a job reached succeeded/failed
struct fx_run_done { std::string run_id; };
struct fx_log { int level = 2; std::string text; };              ///< 0 debug .. 4 error
/// Tell `host`'s latents actor it may remove these (their jobs are finished).
struct fx_release { std::string host; std::vector<std::string> sha256s; };
/// Delete these runs' records (run and jobs) from the journal, then reclaim the space:
/// they finished journal_keep_finished_s ago and the state forgot them before.
struct fx_drop_runs { std::vector<std::string> run_ids; };

/// The answer to ev_submit or ev_add_jobs: the run (the new one, or the one a retried
/// request id names: `duplicate`) and where the jobs added start.
struct fx_accepted { std::string run_id; uint32_t first_index = 0; uint32_t count = 0;
                     bool duplicate = false; };
/// The answer to ev_submit_request: the run made (or the one a retried request id names),
/// or why the submit was refused (nothing recorded then).
struct fx_submit_answer { msg::submit_reply reply; };
/// The answer to ev_add_jobs_request: where the jobs added start and how many, or why none
/// were (nothing recorded then).
struct fx_add_jobs_answer { msg::submit_jobs_reply reply; };
/// Make input `name` of job (run_id, index) from frame `frame` (of `frames`) of the video
/// of its source job: its file `output` (SHA-256 `output_sha256`) made by `decoder`. The
/// shell stores it as an input and answers ev_input_made (asked again while unanswered).
/// With `latent`: the input is the source's latent itself, of SHA-256 `output_sha256`, on
/// host `latent_host` (where it was sampled), stored as an input once verified.
struct fx_make_input { std::string run_id; uint32_t index = 0; std::string name;
                       uint32_t source = 0; std::string output; std::string output_sha256;
                       std::string decoder; uint32_t frame = 0; uint32_t frames = 0;
                       bool latent = false; std::string latent_host; };
/// Write state::drains to the journal (whole: it is small).
struct fx_persist_drains {};
/// A pool or decoder was drained or put back (for the log, the event stream, the metric).
struct fx_drain_changed { std::string target; bool drained = false; std::string reason; };
/// The answer to ev_drain: the targets it named, or why none.
struct fx_drain_answer { std::vector<std::string> targets; std::string error; };
/// The answer to ev_review: the verdict recorded and the take added (-1 = none), or why
/// not (`code`: "no_such_run", "not_reviewable", "invalid").
struct fx_review_answer { std::string error; std::string code; std::string verdict;
                          int64_t take = -1; uint64_t take_seed = 0; };
/// Send a verdict to the decoder on `host` that made the video, for the run index there.
struct fx_send_verdict { std::string host; msg::verdict_index v; };
using effect = std::variant<fx_persist_job, fx_persist_run, fx_send_sample, fx_send_decode,
                            fx_ack, fx_job_final, fx_run_done, fx_log, fx_release, fx_grant,
                            fx_drop_runs, fx_accepted, fx_persist_drains, fx_drain_changed,
                            fx_drain_answer, fx_make_input, fx_review_answer,
                            fx_send_verdict, fx_submit_answer, fx_add_jobs_answer>;

} // namespace vidline::actors::coordinator
