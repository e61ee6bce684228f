#pragma once
/// A pool's order handling: a pure state machine. One job at a time; conditioning first
/// (from the host's encoder), then sampling. Orders are deduplicated by attempt id and
/// results stay in every status report until the coordinator acks them.
///
///   idle --order--> conditioning --conditioned--> sampling --sampled--> idle (+ result)
///                        |                                      
///                        +--- conditioning failed ---> idle (+ transient result)
///
/// Leases, as the decoder's (decoder_machine.hpp): a sampled latent is committed (moved
/// into the host's latent store, receipt, ledger line) only within the order's lease, or
/// after the coordinator's grant names the attempt current; one whose attempt it ended is
/// removed and reported `fenced`:
///
///   sampling --sampled--> lease valid? --yes--> commit --> idle (+ result ok)
///                              | no
///                          confirming --grant current--> commit; --grant ended--> discard
///
/// Checkpoints (docs/reliability.md, "Checkpoints"): while sampling, each checkpoint the
/// shell made durable in the latent store (ev_checkpoint) is reported at once and in every
/// status and result of the attempt (the newest checkpoints_reported). A grant that asks
/// the attempt to make way (lease_grant::preempt) stops it at its next step with a
/// checkpoint (fx_preempt_stage); its result says `preempted`.
///
/// The progress watchdog (knob stall_timeout_s): a sampler that reports its steps and has
/// reported none for `stall_s` (counted from the sampler's start, then from each new step)
/// is hung: its backend call is stopped (fx_cancel_stage) and the attempt ends transient,
/// "stalled", so the job resumes from its newest checkpoint instead of holding its GPUs
/// until the stage timeout. Watched only where steps are expected: a backend that always
/// reports them (reports_steps), or a workflow whose sampler reported steps on this pool
/// before; a backend that never reports steps keeps only the stage timeout.

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "actors/decoder/decoder_machine.hpp"
#include "messages/messages.hpp"

namespace vidline::actors::pool {

enum class phase { idle, conditioning, sampling, confirming };

using decoder::lease_margin;
using decoder::sent_reports;

struct state {
  std::string pool;
  std::string host;
  uint64_t epoch = 0;
  bool accepting = true;
  phase at = phase::idle;
  std::optional<msg::sample_order> current;
  double conditioning_s = 0;
  std::vector<msg::sample_result> unacked;
  std::deque<uint64_t> recent_done;   ///< attempts finished lately (dedups resent orders)
  uint64_t refused_orders = 0;
  uint64_t status_seq = 0;
  double lease_until = -1;            ///< the current attempt's lease (monotonic s)
  bool ended = false;                 ///< the coordinator gave the current attempt up
  msg::sample_result made;            ///< confirming: the result waiting for its word
  std::string staged;                 ///< confirming: the latent, not yet in the store
  sent_reports reports;
  uint64_t fenced = 0;                ///< latents removed: their lease had ended
  /// Real seconds per run-clock second: the `now` of step() times this is the unix time
  /// the results are stamped with (the run clock is unix time / time_scale, nodes/node.cpp).
  double time_scale = 1.0;
  double started_at = -1;             ///< run clock: the current order was taken
  double sampling_started_at = -1;    ///< run clock: its sampler began
  /// The newest checkpoints the current attempt saved, oldest first (at most
  /// checkpoints_reported).
  std::vector<msg::checkpoint_ref> checkpoints;
  bool preempting = false;            ///< the current attempt was asked to make way
  // -- the progress watchdog --
  double stall_s = 0;                 ///< run-clock s without a step that is a hang; 0 = off
  bool steps_expected = false;        ///< the backend reports every sampler's steps
  std::set<std::string> stepping_workflows;  ///< workflows whose sampler reported steps here
  uint32_t progress_step = 0;         ///< the current attempt's newest step
  double progress_at = -1;            ///< run clock: its sampler began, or reached that step
  bool stalled = false;               ///< the current attempt was stopped as hung
  uint64_t stalls = 0;                ///< attempts stopped as hung, since the pool started

  /// The next status report (each one numbered, so the coordinator can drop stale ones),
  /// sent at monotonic `mono_s` (negative: renews no lease).
  msg::pool_status status(double mono_s = -1);
};

struct ev_order { msg::sample_order order; };
struct ev_conditioned { uint64_t attempt = 0; bool ok = false; std::string path;
                        double encode_s = 0; std::string error; };
/// Sampling ended; an ok latent lies at `staged` until committed ("" or the store's own
/// path for a latent made before and reused: nothing to commit).
/// `bad_checkpoint`: the order's resume checkpoint did not verify (its digest).
struct ev_sampled { uint64_t attempt = 0; std::string outcome; std::string error;
                    std::string sha256; uint64_t bytes = 0; double elapsed_s = 0;
                    bool cold = false; std::string staged; double mono_s = 0;
                    std::string model; std::string model_identity;
                    std::string bad_checkpoint; };
/// The sampler of `attempt` saved a checkpoint, now durable in the host's latent store.
struct ev_checkpoint { uint64_t attempt = 0; msg::checkpoint_ref c; };
struct ev_ack { uint64_t attempt = 0; };
/// The running sampler's newest step (0: none yet), read by the shell at every status
/// interval: the watchdog's clock.
struct ev_progress { uint64_t attempt = 0; uint32_t step = 0; };
/// The coordinator answered a status report; `mono_s` is when the grant arrived.
struct ev_grant { msg::lease_grant grant; double mono_s = 0; };
/// The host's latents actor: whether the host is within its latent budget (sent every
/// status interval; a pool at the budget reports accepting=false and gets no jobs).
struct ev_budget { bool accepting = true; };
using event = std::variant<ev_order, ev_conditioned, ev_sampled, ev_ack, ev_grant, ev_budget,
                           ev_checkpoint, ev_progress>;

/// Checkpoints of an attempt named in its status and result: the newest, and the one
/// before it in case the newest does not verify where it is resumed.
inline constexpr std::size_t checkpoints_reported = 2;

struct fx_condition { msg::sample_order order; };
struct fx_sample { msg::sample_order order; std::string conditioning_path; };
struct fx_report {};
struct fx_log { int level = 2; std::string text; };
/// Move the latent at `staged` into the store under its digest; receipt; ledger line.
struct fx_commit { msg::sample_order order; std::string staged; std::string sha256;
                   uint64_t bytes = 0; };
/// Remove the latent at `staged`: its attempt lost the race.
struct fx_discard { msg::sample_order order; std::string staged; };
/// The user cancelled the running attempt's job (lease_grant::cancelled): stop the backend
/// call now (its GPU is freed); the call's result, whatever it is, is not published.
struct fx_cancel_stage { uint64_t attempt = 0; };
/// The coordinator asks the running attempt to make way: its backend saves a checkpoint at
/// its next step and returns `preempted` (a backend that cannot checkpoint runs on).
struct fx_preempt_stage { uint64_t attempt = 0; };
using effect = std::variant<fx_condition, fx_sample, fx_report, fx_log, fx_commit, fx_discard,
                            fx_cancel_stage, fx_preempt_stage>;

std::vector<effect> step(state& s, const event& e, double now);

} // namespace vidline::actors::pool
