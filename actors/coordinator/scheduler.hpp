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
///
/// Its parts: jobs and runs (scheduler_jobs.hpp), events and effects (scheduler_events.hpp);
/// here the views, the policies' interface, the state and step().

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

#include "actors/coordinator/scheduler_events.hpp"
#include "actors/coordinator/scheduler_jobs.hpp"
#include "actors/gpu/power_log.hpp"
#include "messages/messages.hpp"
#include "messages/review.hpp"

namespace vidline::config {
struct cluster;
} // namespace vidline::config

namespace vidline::actors::coordinator {

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
  /// decode there unloads its model (coordinator::configure fills it from the config).
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
  /// Some job of the run takes another's latent (coordinator::latents_wanted looks only here).
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
  /// Outputs by job key of runs the state forgot (coordinator::remember_outputs; not journaled:
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
  /// The config a client's submit is checked against (ev_submit_request,
  /// ev_add_jobs_request): modes, workflows, knobs; set by coordinator::initial_state.
  /// Unset, such a submit is refused.
  std::shared_ptr<const config::cluster> config;
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

} // namespace vidline::actors::coordinator
