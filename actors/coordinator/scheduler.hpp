#pragma once
/// The coordinator's scheduling and recovery logic: a pure state machine
/// `step(state, event, now) -> effects`. No sockets, files or clocks: the live coordinator,
/// the planner and the simulation tests drive this very code.
///
/// A job moves through
///
///     queued --sample_order--> sampling --ok--> sampled --decode_order--> decoding
///       ^                          |                ^                        |
///       +---- transient/lost/------+                +--- transient/lost -----+
///       |     capacity (other kind)                  |                        |
///       +----------- latent not found ---------------+--------------------- ok --> succeeded
///                                                                  fatal/exhausted --> failed
///
/// Every change to a job is journaled (effect `persist_job`) before any message that
/// depends on it is sent: effects are executed in order.
///
/// Leases (docs/reliability.md, "Leases"). A stage order is a lease of `lease_s` on the
/// coordinator's monotonic clock (the `mono` of step()), from the order and from every
/// status report that shows the attempt, each answered with a grant (fx_grant) naming the
/// attempts still current and those given up on. A stage whose worker's host went down is
/// moved elsewhere only after its lease expired; a worker restarted (a new epoch) has
/// lost its attempt at once. A late product of another attempt is adopted when the job
/// still waits for it (the current attempt is then given up on), and counted as a stage
/// done twice when the job already has one (a video is then removed: `discard`).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "actors/gpu/power_log.hpp"
#include "messages/messages.hpp"
#include "messages/review.hpp"

namespace vidline::sched {

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

/// The coordinator's view of one pool, rebuilt from its status reports.
struct pool_view {
  std::string name;
  std::string host;
  std::string kind;                ///< profile key, e.g. "t10x8"
  std::string encoder_kind;        ///< profile key of its host's encoder ("" none)
  std::set<std::string> conflicts; ///< pools sharing a GPU with this one
  /// Largest job load (width x height x seconds) the profile says it holds; a larger job is
  /// never ordered here. nullopt = no known limit (only an out-of-memory result stops it).
  std::optional<uint64_t> max_load;
  bool alive = false;              ///< a status arrived and its host is up
  bool accepting = true;
  uint64_t epoch = 0;
  uint64_t last_seq = 0;           ///< of the newest status of this epoch
  std::set<uint64_t> retired;      ///< epochs replaced by a newer one (their reports are stale)
  uint64_t reported_busy = 0;      ///< attempt the pool last said it runs (0 idle)
  std::optional<std::pair<std::string, uint32_t>> assigned;  ///< (run, index) we gave it
  double last_status = -1;
  /// Its model is loaded: a result came back since it (re)started, and no pool sharing its
  /// GPUs was ordered since. An estimate for the auto policy; the pool itself knows better.
  bool warm = false;
  /// Which model it holds while warm: the model key of the job whose result came back last
  /// (a pool holds one model at a time; a job of another model is a cold stage, a switch).
  std::string model;
  double ordered_at = -1;          ///< when the current order first went out (-1 idle)
  /// Decoders on one of its GPUs: it does not sample while one of them has a latent, and a
  /// decode there unloads its model (dispatching::configure fills it from the config).
  std::set<std::string> decoders_sharing;
  /// How much slower than its estimate it samples, as observed this epoch: an exponentially
  /// weighted mean of (sampling seconds its ok results' stamps show) / (the policy's
  /// estimate for that job, cold or warm alike), weight speed_weight, clamped to
  /// [speed_min, speed_max]. 1 = as estimated (and before any observation, after a
  /// restart, and under a policy that keeps no estimates; each observation starts from the
  /// factor before it, the first from 1). The auto policy multiplies its
  /// sampling estimates for this pool by it. Not journaled: a live view only.
  double speed_factor = 1;
  uint32_t speed_observed = 0;     ///< results folded into speed_factor this epoch
  uint32_t gpus = 1;               ///< GPUs it samples on (GPU-seconds paid twice)
  /// The attempt asked to checkpoint and stop for a job of a higher priority (preempt.hpp;
  /// 0 = none): named in every grant while it runs.
  uint64_t preempt_attempt = 0;
  /// Drained (state::drains): no new order; a stage it runs finishes. Kept equal to
  /// `drains` having an entry for it by the drain handlers (drain.cpp).
  bool drained = false;
  /// Its cards, "host/gpu id" (the keys of the power log and the health events).
  std::vector<std::string> cards;
  /// The model its backend says it holds loaded (pool_status::model; "" = none or unknown).
  std::string reported_model;
  std::string reported_identity;
};

/// Whether `p` holds the model job `j` needs loaded (its next stage of `j` would be warm).
inline bool warm_for(const pool_view& p, const msg::job_spec& j) {
  return p.warm && p.model == j.model;
}

/// The weight of the newest observation in pool_view::speed_factor: a hot GPU's slowdown
/// shows after two or three results, one odd result moves the factor at most half way.
inline constexpr double speed_weight = 0.5;
/// The range pool_view::speed_factor is kept in (a bad stamp cannot starve or flood a pool).
inline constexpr double speed_min = 0.2;
inline constexpr double speed_max = 5.0;

/// The coordinator's view of one decoder.
struct decoder_view {
  std::string name;
  std::string host;
  std::string kind;
  bool alive = false;
  uint64_t epoch = 0;
  uint64_t last_seq = 0;
  std::set<uint64_t> retired;
  uint32_t capacity = 2;
  std::set<uint64_t> holding;                  ///< attempts it reported holding
  std::map<uint64_t, double> ordered;          ///< attempts sent, not yet seen held or done
  std::map<uint64_t, double> sent;             ///< attempts sent and not finished: when the
                                               ///< order (last) went out (for estimates)
  double last_status = -1;
  uint32_t pending = 0;                        ///< latents waiting behind its decode (reported)
  uint64_t fenced = 0;                         ///< products it removed, this epoch (reported)
  uint32_t unacked = 0;                        ///< results in its last report, not yet acked
  /// Pools using its GPU: it takes no latent while one of them samples (see
  /// pool_view::decoders_sharing).
  std::set<std::string> shares_gpu_with;
  /// Orders it may take now: capacity minus what it holds or has on the way.
  uint32_t credits() const;
  /// Drained (state::drains): no new latent; those it holds are decoded.
  bool drained = false;
  /// Its card, "host/gpu id" (as pool_view::cards).
  std::vector<std::string> cards;
};

/// Why a pool or decoder is drained (docs/reliability.md, "Drains"): by hand (`vidline
/// drain`), and/or because a card it uses is sick (the health rule of its node). It takes
/// orders again when neither holds: `vidline undrain` clears both, a card's recovery
/// clears that card.
struct drain {
  bool by_hand = false;
  std::string reason;                ///< the hand drain's reason, else the first sick card's
  std::set<std::string> sick_gpus;   ///< "host/index" of its sick cards
  double since = -1;                 ///< run clock: when it was drained
  bool active() const { return by_hand || !sick_gpus.empty(); }
};

/// Tunables of the machine, all in run-clock seconds.
struct params {
  double order_resend_s = 2;       ///< resend an order the target has not shown after this
  uint32_t max_attempts = 3;       ///< stage attempts per job for transient failures
  uint32_t handoff_retries = 3;    ///< corrupt latents per job before it fails
  double latent_wait_s = 10;       ///< a sampled latent's host may be down this long before
                                   ///< the job is sampled again elsewhere
  uint32_t lost_factor = 3;        ///< lost attempts refunded per job: up to this x max_attempts
  double home_wait_s = 10;         ///< in_turn: a job waits this long after submission for
                                   ///< a home pool that never reported, then goes elsewhere
  double lease_s = 3;              ///< a stage order's lease, monotonic seconds (knob lease_ms)
  /// Real seconds per run-clock second: a worker's unix stamp / time_scale is run clock.
  double time_scale = 1;
  /// A stage that failed transiently (the worker's result said so: a full disk, a crashed
  /// or hung backend) is not ordered again before now + retry_backoff_s x 2^(n - 1), n
  /// its transient failures in a row, at most retry_backoff_max_s (knobs retry_backoff_ms,
  /// retry_backoff_max_ms); meanwhile its pool or decoder takes other jobs. 0 = at once.
  /// Attempts lost to a crash or a host going down are not backed off.
  double retry_backoff_s = 1;
  double retry_backoff_max_s = 60;
  /// Retention (docs/reliability.md, "Retention"), run-clock seconds after a run finished
  /// (every job final): at the first tick from then on the run leaves the state (knob
  /// finished_run_memory_s; 0 = at the next tick), and later its records leave the journal
  /// (fx_drop_runs; knob journal_keep_finished_s, never before it left the state). -1 =
  /// never (the knob's 0 for the journal).
  double finished_run_memory_s = -1;
  double journal_keep_finished_s = -1;
  /// Model affinity (dispatch_sampling): a job passed over for jobs of the model a pool
  /// holds goes once it has been passed over this long (run-clock seconds, knob
  /// model_wait_s); -1 = one cold sampling stage of the job as the policy estimates it
  /// (its model's load and the stage), default_model_wait_s where the policy has no
  /// estimate; 0 = no job is passed over.
  double model_wait_s = -1;
  /// Preemption (preempt.hpp): a queued job whose run's priority exceeds a sampling job's
  /// by at least this asks that job to checkpoint and stop at its next step (knob
  /// preempt_priority_gap; 0 = never, the default).
  int32_t preempt_priority_gap = 0;
  /// How often a sampler saves a checkpoint (knob checkpoint_interval_s, run-clock
  /// seconds): a job whose newest checkpoint is older than this (and a grace of one
  /// status interval) is not preempted, its backend does not checkpoint.
  double checkpoint_interval_s = 60;
};

/// model_wait_s's fallback under a policy without stage estimates (in_turn, first_free).
inline constexpr double default_model_wait_s = 600;

/// A host down, as peer events said (run clock; to = -1 while it is still down).
struct outage {
  std::string host;
  double from = -1;
  double to = -1;
};

/// Outages kept (the newest).
inline constexpr std::size_t max_outages_kept = 256;

/// A job a policy sends to a pool now.
struct assignment {
  uint32_t job = 0;   ///< index in the run
  uint32_t pool = 0;  ///< pool id (state_index::pool_names)
};

struct state;
struct run_index;

/// What a dispatch policy sees of one run at one moment.
struct dispatch_view {
  const state& s;
  const run& r;
  const run_index& queue;              ///< the run's queued jobs
  const std::vector<uint32_t>& free;   ///< ids of the mode's pools free now, in mode order
  double now;
  /// Jobs queued in every open run of the mode, this one's included: the queue a policy
  /// that looks ahead fills the pools' slots from (runs share the line).
  std::size_t mode_queued = 0;
  /// The pool with this id.
  const pool_view& pool(uint32_t id) const;
};

/// How a mode hands its queued jobs to its pools. The machine asks `next` again after
/// every assignment (with the pool then taken out of `free`) until it answers nullopt.
/// A policy must only name a pool from `free` that pool_may_take() the job.
class dispatch_policy {
public:
  virtual ~dispatch_policy() = default;
  /// The policy's name as a mode's config names it ("in_turn", "first_free", "auto").
  virtual const char* name() const = 0;
  virtual std::optional<assignment> next(const dispatch_view& v) const = 0;
  /// The decoder a sampled job of run `r` goes to now, among `decoders` (the mode's, in
  /// order); nullptr = it waits (and so do the jobs sampled after it). Only a decoder with
  /// credits may be named. By default the alive one with the most credits (the first of them).
  virtual decoder_view* pick_decoder(const state& s, const run& r, const job& j,
                                     const std::vector<decoder_view*>& decoders,
                                     double now) const;
  /// The sampling seconds the policy expects of `j` on a pool of `kind` (cold: model load
  /// first), against which a pool's observed speed is measured (pool_view::speed_factor);
  /// nullopt = no estimate (the default: the factor stays 1).
  virtual std::optional<double> expected_sampling(const std::string& kind,
                                                  const msg::job_spec& j, bool cold) const {
    (void)kind, (void)j, (void)cold;
    return std::nullopt;
  }
};

/// Strict round robin, as the reference line dispatched: job i belongs to the pool
/// i mod n of the mode's n pools able to hold its size, in the mode's order, and waits for
/// it even while another pool is free. A job whose home pool is out of service (host down,
/// restarted away, not accepting, or never reported within home_wait_s) goes to the first
/// free able pool instead; a job that ran out of memory somewhere gets its home among the
/// pools left to it. The default of every mode.
class in_turn_policy : public dispatch_policy {
public:
  const char* name() const override { return "in_turn"; }
  std::optional<assignment> next(const dispatch_view& v) const override;
};

/// The first free able pool in the mode's order takes the lowest queued job: jobs go to
/// whichever source is free first (greedy).
class first_free_policy : public dispatch_policy {
public:
  const char* name() const override { return "first_free"; }
  std::optional<assignment> next(const dispatch_view& v) const override;
};

/// A job's load: width x height x seconds (what pool_view::max_load is stated in).
uint64_t job_load(const msg::job_spec& j);

/// Bookkeeping of one run's queue (part of state::idx).
struct run_index {
  std::set<uint32_t> queued;                  ///< every queued job, lowest index first
  std::set<uint32_t> restricted;              ///< queued jobs that ran out of memory somewhere
                                              ///< (or differ in size from the run's first)
  std::vector<uint32_t> able;                 ///< mode pools whose max_load holds the size
  std::vector<int32_t> able_pos;              ///< pool id -> position in `able`, or -1
  std::vector<std::set<uint32_t>> by_home;    ///< unrestricted queued jobs by home
                                              ///< ((turn_base + i) mod n)
  uint32_t unfinished = 0;                    ///< jobs not yet succeeded or failed
  std::map<std::string, double> first_order_on_host;  ///< conditioning starts there
  /// in_turn's rotation is over the whole queue, not per run: job i of this run has turn
  /// turn_base + i, turn_base = the jobs of the runs of its mode submitted before it.
  uint64_t turn_base = 0;
  /// job -> the jobs that take an input from it (graph.hpp); empty without a graph.
  std::vector<std::vector<uint32_t>> takers;
  /// Some job of the run takes another's latent (graph::latents_wanted looks only here).
  bool takes_latents = false;
  /// Queued jobs by their model key, lowest index first (model affinity).
  std::map<std::string, std::set<uint32_t>> queued_by_model;
};

/// Lookups that keep a step's cost independent of the number of jobs: queues per run,
/// sampled jobs in decode order, decoding jobs per decoder, the free pools by id. Derived
/// from the rest of the state: step() builds it the first time and keeps it current (and
/// re-points it after the state was copied); after changing runs, jobs, pools or modes
/// other than through step(), call reindex().
struct state_index {
  bool built = false;
  const state* owner = nullptr;               ///< the state `pool_views` point into
  std::vector<std::string> pool_names;        ///< pool id -> name (the order of state::pools)
  std::vector<pool_view*> pool_views;         ///< pool id -> its view in `owner`
  std::map<std::string, uint32_t> pool_ids;
  std::vector<std::vector<uint32_t>> related; ///< pool id -> pools sharing a GPU with it
  std::vector<char> free_flag;                ///< pool id -> pool_free()
  std::vector<char> unavailable_flag;         ///< pool id -> host down, never reported, dead
                                              ///< or not accepting
  std::set<uint32_t> free_pools, unavailable; ///< the same as sets
  std::map<std::string, std::vector<uint32_t>> mode_ids;  ///< mode -> pool ids, in order
  std::map<std::string, std::vector<int32_t>> mode_pos;   ///< mode -> pool id -> position
  /// mode -> its decoders' views in `owner`, in the mode's order
  std::map<std::string, std::vector<decoder_view*>> mode_decoder_views;
  std::map<std::string, std::size_t> run_pos;             ///< run id -> position in runs
  std::vector<run_index> runs;                            ///< same order as state::runs
  std::set<std::tuple<double, std::size_t, uint32_t>> sampled;  ///< (sample_end, run, job)
  std::map<std::string, std::set<std::pair<std::size_t, uint32_t>>> decoding;  ///< by decoder
  std::vector<uint32_t> decoder_shared;       ///< pools sharing a GPU with a decoder
  /// Queued or sampled jobs waiting out a retry backoff: (job::retry_at, run, job). They
  /// are in none of the dispatch sets (run_index::queued, sampled) until it is over.
  std::set<std::tuple<double, std::size_t, uint32_t>> backoff;
  /// The runs in dispatch order: priority (higher first), then submission (position).
  std::vector<std::size_t> run_order;
  /// Attempts of cancelled jobs: a worker still running one is told to stop it
  /// (lease_grant::cancelled), not only that it ended.
  std::set<uint64_t> cancelled_attempts;
  /// Waiting jobs whose sources all have their video: their inputs are being made
  /// (fx_make_input), (run, job).
  std::set<std::pair<std::size_t, uint32_t>> inputs_due;
  /// Outputs of the state's jobs by job key (succeeded, with a key).
  std::map<std::string, held_output> outputs_by_key;
  /// Verdicts the video's host has not confirmed in its run index, by the decoder that
  /// made the video: (run id, job) (verdicts.hpp).
  std::map<std::string, std::set<std::pair<std::string, uint32_t>>> verdicts_due;
};

/// The whole machine state.
struct state {
  params p;
  std::map<std::string, std::vector<std::string>> modes;  ///< mode -> pools, in order
  std::map<std::string, std::vector<std::string>> mode_decoders;
  /// mode -> its dispatch policy; a mode not named here uses in_turn.
  std::map<std::string, std::shared_ptr<const dispatch_policy>> mode_policy;
  std::map<std::string, pool_view> pools;
  std::map<std::string, decoder_view> decoders;
  std::map<std::string, bool> hosts_up;                   ///< from peer events
  std::map<std::string, double> host_down_since;
  std::deque<outage> outages;                             ///< oldest first (not journaled)
  std::deque<run> runs;                                   ///< oldest first
  uint64_t next_attempt = 1;
  /// Runs forgotten (params::finished_run_memory_s) whose records the journal still holds,
  /// by when they finished: (finished_at, run id). Empty while the journal keeps every
  /// run (journal_keep_finished_s < 0). Not journaled: a restarted coordinator loads such
  /// runs back and forgets them again at its first tick.
  std::set<std::pair<double, std::string>> journaled;
  /// Jobs of the forgotten runs of each mode: in_turn's rotation goes on after them as it
  /// did while they were here (run_index::turn_base), so forgetting moves no job's home.
  std::map<std::string, uint64_t> forgotten_jobs;
  uint64_t runs_forgotten = 0;                            ///< since start (a metric)
  /// Results naming a job the state does not hold (a forgotten run's, or an unknown one):
  /// acknowledged and otherwise ignored; counted since start (a metric).
  uint64_t unknown_job_results = 0;
  /// GPU-seconds of sampling paid twice (job::gpu_s_redone) since start, every run (a metric).
  double gpu_s_redone = 0;
  /// Outputs by job key of runs the state forgot (graph::remember_outputs; not journaled:
  /// a restarted coordinator finds those of the runs it loads again).
  std::map<std::string, held_output> held_outputs;
  std::deque<std::string> held_order;                     ///< their keys, oldest first
  uint64_t jobs_reused = 0;                               ///< since start (a metric)
  /// Drained pools and decoders by target ("pool:NAME", "decoder:NAME"); journaled
  /// (fx_persist_drains), so a restarted coordinator keeps them.
  std::map<std::string, drain> drains;
  /// The health each card last reported ("host/index" -> sick): a drain follows a change
  /// only, so `vidline undrain` holds until the card next changes. Not journaled.
  std::map<std::string, bool> gpu_sick;
  /// Every card's power on the run clock (ev_gpu_power), for the energy of the stages
  /// (job::sampling_energy_j, decode_energy_j). Not journaled: a stage that ends after a
  /// restart counts the readings since.
  gpu::power_log power;
  state_index idx;

  run* find_run(const std::string& id);
  const run* find_run(const std::string& id) const;
  job* find_job(const std::string& run_id, uint32_t index);
  bool pool_free(const std::string& pool) const;
  bool host_up(const std::string& host) const;
  /// The policy of a mode (in_turn when none was installed).
  const dispatch_policy& policy_of(const std::string& mode) const;
};

/// Rebuilds state::idx from the rest of the state.
void reindex(state& s);

inline const pool_view& dispatch_view::pool(uint32_t id) const { return *s.idx.pool_views[id]; }

/// Where state::idx disagrees with a rebuilt one ("" = it agrees). For tests.
std::string check_index(const state& s);

/// True when a pool using decoder `d`'s GPU samples now: `d` takes no latent then.
bool decoder_blocked(const state& s, const decoder_view& d);

/// True when pool `p` may take job `j`: its kind has not run out of memory on the job, and
/// the job's load is within the pool's max_load.
bool pool_may_take(const pool_view& p, const job& j);

// -- events --------------------------------------------------------------------------------

struct ev_submit { run r; };                       ///< a new run (ids and jobs filled in); a request id seen before adds nothing (fx_accepted names that run)
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
                           ev_review, ev_gpu_power, ev_verdict_indexed>;

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
                            fx_send_verdict>;

/// Puts drains read back from the journal into the state (a restarted coordinator): the
/// views of the pools and decoders they name are marked; names no longer in the config
/// are dropped.
void restore_drains(state& s, std::map<std::string, drain> drains);

/// The run of the state a submit's request id made, if any: submits are idempotent by
/// request id (ev_submit answers a retry with that run). A forgotten run's request id is
/// the journal's to answer (the shell asks it).
const run* run_of_request(const state& s, const std::string& request_id);

/// Applies one event at run-clock time `now` and monotonic time `mono` (seconds; leases);
/// returns the effects to execute, in order.
std::vector<effect> step(state& s, const event& e, double now, double mono);

/// The same where the run clock is the monotonic one (simulations and tests).
inline std::vector<effect> step(state& s, const event& e, double now) {
  return step(s, e, now, now);
}

/// The earliest run-clock time a job's retry backoff ends (nullopt: none waits): a
/// driver without regular ticks (a simulation) delivers an ev_tick then.
std::optional<double> next_retry(const state& s);

/// Summary figures of a run (the status contract's "summary").
struct summary {
  uint32_t succeeded = 0;
  uint32_t failed = 0;
  uint32_t cancelled = 0;
  uint32_t reused = 0;             ///< outputs made before under the same key
  uint32_t done_twice = 0;         ///< stages done twice (job::duplicates, summed)
  uint32_t fenced = 0;             ///< products removed unpublished (job::fenced, summed)
  uint32_t products_retracted = 0; ///< videos removed after publication (job::retracted)
  double gpu_s_paid_twice = 0;     ///< sampling GPU-seconds redone (job::gpu_s_redone)
  double first_finish_s = 0;
  double makespan_s = 0;
  double clips_per_hour = 0;
  /// The energy its jobs' stages drew (job::sampling_energy_j + decode_energy_j, where
  /// known), and per clip made: -1 = unknown (no stage's energy is known, or no clip).
  double energy_j = -1;
  double wh_per_clip = -1;
  double clips_per_kwh = -1;
};
summary summarize(const run& r);

} // namespace vidline::sched
