#pragma once
/// The scheduler's jobs and runs (scheduler.hpp): a job's states, its stage times, failed
/// attempts and checkpoints, everything the coordinator knows of it, and the run it is in.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "messages/messages.hpp"
#include "messages/review.hpp"

namespace vidline::actors::coordinator {

/// `cancelled`: the user stopped it (`vidline cancel`); final like succeeded and failed.
/// `waiting`: an input taken from another shot is not made yet (graph.hpp); it is queued
/// once it is. `reused`: final, its output is one made before under the same job key.
enum class job_state { queued, sampling, sampled, decoding, succeeded, failed, cancelled,
                       waiting, reused };
/// succeeded, failed, cancelled or reused: nothing more happens to the job.
inline bool is_final(job_state s) {
  return s == job_state::succeeded || s == job_state::failed || s == job_state::cancelled
         || s == job_state::reused;
}
/// succeeded or reused: the job has its video.
inline bool has_output(job_state s) {
  return s == job_state::succeeded || s == job_state::reused;
}
const char* to_string(job_state s);
std::optional<job_state> job_state_from(const std::string& s);

/// When the stages that made a job's latent and its video ran, from the stamps their
/// workers put on the results (msg::sample_result, msg::decode_result), converted to the
/// coordinator's run clock, plus when the coordinator ordered the decode (the end of the
/// wait for a decoder). Run-clock seconds; -1 = not known (not reached yet). In order:
///
///   pool_start <= sampler_start <= sampler_end <= decode_ordered <= fetch_start
///     <= fetched <= decode_start <= decode_end <= (when the result arrived)
///
/// conditioning = [pool_start, sampler_start], sampling = [sampler_start, sampler_end],
/// waiting for a decoder = [sampler_end, decode_ordered], handoff = [fetch_start, fetched],
/// pending at the decoder = [fetched, decode_start], decode = [decode_start, decode_end].
struct stage_clock {
  double pool_start = -1, sampler_start = -1, sampler_end = -1;
  double decode_ordered = -1;
  double fetch_start = -1, fetched = -1, decode_start = -1, decode_end = -1;
};

/// An attempt that failed or was lost (run clock), for the status and its Gantt chart.
struct failed_attempt {
  std::string stage;   ///< "sampling" (on a pool) or "decode" (on a decoder, handoff included)
  std::string lane;    ///< the pool or decoder
  double start = -1;   ///< when it began (the worker's stamp, else when it was ordered)
  double end = -1;     ///< when it ended (the worker's stamp, else when it was given up)
  std::string reason;
};

/// Failed attempts kept per job (the newest; job::failures_total counts them all).
inline constexpr std::size_t max_failures_kept = 8;

/// A checkpoint of a job's sampler the coordinator knows of (checkpoints.hpp): where it
/// lies and the pool kind that saved it (another kind is another model shard layout, so
/// only a pool of the same kind resumes from it).
struct kept_checkpoint {
  msg::checkpoint_ref ref;
  std::string kind;
};

/// Everything the coordinator knows about one job. Times are run-clock seconds (-1 = not yet).
struct job {
  msg::job_spec spec;
  job_state state = job_state::queued;
  uint64_t attempt = 0;            ///< the current (or last) attempt id; results of others are fenced
  uint32_t sample_attempts = 0;    ///< sampling attempts started
  uint32_t decode_attempts = 0;    ///< decoding attempts started
  uint32_t corrupt_handoffs = 0;   ///< decodes refused because the latent did not verify
  uint32_t lost_attempts = 0;      ///< attempts lost to a crash or a host going down; they
                                   ///< do not count against max_attempts (not the job's
                                   ///< fault) unless a job keeps losing them (a poison job)
  uint32_t handoff_failures = 0;   ///< transient failures to move the latent
  uint64_t progress_attempt = 0;   ///< the attempt its pool last reported progress for:
  uint32_t progress_step = 0;      ///<   step of steps (not journaled: a live view only)
  uint32_t progress_steps = 0;
  /// When its pool last reported running attempt `running_attempt` (run clock; not
  /// journaled): a lost attempt's GPU time paid twice is counted up to here, not to when it
  /// was given up (a host killed or stopped does no work while the lease runs out).
  double running_seen_at = -1;
  uint64_t running_attempt = 0;
  std::string pool;                ///< pool of the current/last sampling attempt
  std::string decoder;             ///< decoder of the current/last decoding attempt
  std::string latent_sha256;
  uint64_t latent_bytes = 0;
  std::string latent_host;         ///< host holding the latent
  std::string output;              ///< absolute path of the video file
  std::string output_sha256;
  std::string error;               ///< why it failed (or the last retried failure)
  std::set<std::string> capacity_failed;  ///< pool profile keys that ran out of memory on it
  bool cold = false;
  /// Since when model affinity has passed it over for jobs of the model a pool holds (run
  /// clock; -1 = it was not). Not journaled: after a restart its wait counts afresh.
  double passed_over_at = -1;
  /// The model its latent was sampled with, as its pool's backend said it (key and
  /// identity, msg::sample_result; "" = the backend cannot tell).
  std::string sampled_model;
  std::string model_identity;
  double order_sent_at = -1;       ///< when the current order was (re)sent
  double sample_start = -1, sample_end = -1, decode_start = -1, decode_end = -1;
  double conditioning_s = 0, sampling_s = 0, handoff_s = 0, decode_s = 0;
  /// What measured those times, for profiles learned from history (a config may change
  /// between runs): the profile keys of the pool, its host's encoder and the decoder, and
  /// whether the latent was already on the decoder's host.
  std::string pool_kind, encoder_kind, decoder_kind;
  bool handoff_same_host = false;
  double lease_until = -1;         ///< monotonic s: the current attempt's lease (not journaled)
  uint64_t latent_attempt = 0;     ///< the sampling attempt whose latent the job has
  uint32_t duplicates = 0;         ///< stages done twice: another attempt's product came
                                   ///< after the job had its own
  uint32_t fenced = 0;             ///< products removed unpublished: their lease had ended
  /// Videos published, then removed (result_ack.discard): another attempt's had won. Each
  /// is also a stage done twice (duplicates).
  uint32_t retracted = 0;
  /// GPU-seconds of sampling paid twice (run clock): for every sampling attempt that ended
  /// without the job's latent and made it sample again (a node killed, a worker crashed, a
  /// lease expired, a transient error, out of memory), its span times its pool's GPUs.
  double gpu_s_redone = 0;
  std::set<uint64_t> counted_attempts;  ///< late attempts counted in duplicates or fenced
  /// The newest checkpoints its sampler saved (checkpoints.hpp), oldest first, at most
  /// checkpoints_kept: the next sampling attempt on a pool of their kind resumes from the
  /// newest. Journaled; cleared once its latent is made.
  std::vector<kept_checkpoint> checkpoints;
  /// Checkpoints of attempts before this one are not resumed from: the job moved to a
  /// bigger pool kind after running out of memory, from step 0. Journaled.
  uint64_t checkpoint_floor = 0;
  /// The step the current (or last) sampling attempt resumed from (0 = from the start).
  uint32_t resumed_step = 0;
  /// Preemption (params::preempt_priority_gap): how often a job of a higher priority made
  /// this one stop at a checkpoint, and when it last asked (run clock; -1 = never; not
  /// journaled). A job is asked at most once per its stage time.
  uint32_t preemptions = 0;
  double preempt_asked_at = -1;
  double attempt_at = -1;          ///< when the current attempt was ordered
  stage_clock ran;                 ///< when the stages of its latent and video ran
  std::vector<failed_attempt> failures;  ///< the newest max_failures_kept, oldest first
  uint32_t failures_total = 0;
  /// The energy of the stages that made its latent (conditioning and sampling, on the
  /// pool's cards) and its video (the decode, on the decoder's card): their cards' power
  /// integrated over the stage (gpu::power_log). Joules; -1 = unknown (no telemetry).
  double sampling_energy_j = -1, decode_energy_j = -1;
  /// Retry backoff (params::retry_backoff_s): a queued or sampled job is not ordered again
  /// before this run-clock time (-1 = no wait). Not journaled: a restarted coordinator
  /// retries at once. Cleared by any change of state and when the wait is over.
  double retry_at = -1;
  uint32_t retry_streak = 0;       ///< transient failures in a row (not journaled): the
                                   ///< next backoff is retry_backoff_s x 2^(streak - 1)
  /// Where a reused job's video came from: "cluster" (an output the coordinator knows),
  /// "collection" (the run's collection folder); "" = not reused.
  std::string reused_from;
  /// When its inputs taken from other shots were last asked for (fx_make_input; not
  /// journaled: a restarted coordinator asks again).
  double inputs_asked_at = -1;
  // -- the review (ev_review; docs/http.md, "Review") ---------------------------------------
  std::string verdict;             ///< the reviewer's: "" none, "accepted", "rejected"
  double reviewed_at = -1;         ///< run-clock time of the verdict
  int64_t retake = -1;             ///< the index of the take its reject added (-1 = none)
  int64_t retake_of = -1;          ///< the job whose reject added this take (-1 = none)
  /// The verdict in the run index on the video's host (verdicts.hpp): its revision (1 for
  /// the first verdict, one more for each change) and the revision that host confirmed,
  /// both journaled; when it was last sent and the error the last answer named, not
  /// journaled (a restarted coordinator sends at the decoder's first report).
  uint32_t verdict_revision = 0;
  uint32_t verdict_indexed = 0;
  double verdict_sent_at = -1;
  std::string verdict_error;
};

/// An output a job made, found again by its job key (graph.hpp, "Job keys").
struct held_output {
  std::string output;       ///< its path on the decoder's host (in a collection: its file name)
  std::string sha256;
  std::string decoder;      ///< the decoder that made it
  std::string run_id;       ///< the job that made it
  uint32_t index = 0;
  /// Found in the run's collection folder (run::collected), not among the cluster's outputs.
  bool collection = false;
};

/// One batch submitted together. Open runs share the line (docs/design.md, "The queue"):
/// their jobs are dispatched by priority (higher first), then submission order.
struct run {
  std::string id;
  std::string mode;
  std::string request_id;          ///< the client's idempotency key
  double submitted_at = 0;
  double finished_at = -1;
  bool done = false;
  std::vector<job> jobs;
  int32_t priority = 0;            ///< `vidline run --priority N`: higher goes first
  bool cancelled = false;          ///< `vidline cancel RUN` (the whole run)
  /// `vidline submit` request ids already applied -> the first index they added (a
  /// retried submit adds nothing twice).
  std::map<std::string, uint32_t> added_requests;
  /// `vidline run --rerender`: every job renders, even one whose key names an output held.
  bool rerender = false;
  /// Videos the submitting client's collection folder holds, verified there, by job key
  /// (msg::submit_run::collected): a job whose key no output of the cluster matches reuses
  /// one of these.
  std::map<std::string, held_output> collected;
  /// Sequences of the run: name -> its parts' job indexes in the shot list's order (a
  /// sequence is joined from them once all have their video: docs/shots.md, "Sequences").
  std::map<std::string, std::vector<uint32_t>> sequences;
};

} // namespace vidline::actors::coordinator
