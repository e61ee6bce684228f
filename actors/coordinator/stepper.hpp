#pragma once
/// The scheduler's step inside (scheduler.cpp's step()): the stepper, a working context
/// for one event, declared here and defined in stepper_*.cpp by the events it handles.
/// Not for use outside the scheduler; the public face is scheduler.hpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// The machine's working context for one step: state, time, and the effects so far.
struct stepper {
  state& s;
  double now;
  double mono;  ///< monotonic seconds: leases
  std::vector<effect> fx;

  void log(int level, std::string text) { fx.push_back(fx_log{level, std::move(text)}); }

  void persist(const job& j) { fx.push_back(fx_persist_job{j.spec.run_id, j.spec.index}); }

  static std::string job_name(const job& j) {
    return j.spec.run_id + "/" + std::to_string(j.spec.index);
  }

  // -- stage times -------------------------------------------------------------------------

  // stepper_times.cpp: a result's stages on the run clock, their energy; failed attempts
  /// A worker's unix stamp on the run clock (-1 for 0: not stamped).
  double run_of(double unix_s) const { return unix_s > 0 ? unix_s / s.p.time_scale : -1; }

  /// Makes `t` (stamps in stage order, -1 = unknown) ordered and no later than now: each
  /// known one no earlier than the known one before it, then none past the one after it.
  void order_stamps(std::vector<double*> t) const;

  /// The sampling stages of the attempt that made `r`'s latent. A result without stamps
  /// (an older pool) ends when it arrived and lasts its reported durations.
  void record_sampling(job& j, const msg::sample_result& r);

  /// The stages running now on `cards` of pools and decoders other than pool `self_pool` or
  /// decoder `self_decoder`, since their orders went out: a stage's energy is split with
  /// them. Called per result: no allocation per pool or decoder (800 pools at scale).
  std::vector<gpu::power_log::running> running_on(const std::vector<std::string>& cards,
                                                  const std::string& host,
                                                  const std::string& self_pool,
                                                  const std::string& self_decoder) const;

  /// The decoder's stages of the attempt that made `r`'s video (as record_sampling).
  void record_decoding(job& j, const msg::decode_result& r);

  /// Stamps of a failed result (start, end), -1 where it has none.
  std::pair<double, double> stamps_of(double start_unix, double end_unix) const;
  /// The failed result being handled now, if any: its stamps for note_failure.
  std::pair<double, double> failing_stamps{-1, -1};

  /// The job's current attempt failed or was lost: kept for the status, if it was one
  /// (the job was sampling or decoding).
  /// `redone`: the stage is to run again (a sampling attempt's GPU time is paid twice);
  /// false when the job ends here (failed, cancelled).
  void note_failure(job& j, const std::string& why, bool redone = true);

  // -- job transitions ---------------------------------------------------------------------

  // stepper_jobs.cpp: a job's moves between states
  void release_pool_of(const job& j);

  void release_decoder_of(const job& j);

  void set_state(job& j, job_state to);

  /// A pool's availability changed: refresh the free-list for it and the pools sharing GPUs.
  void touch(const std::string& pool);

  void finish(job& j, job_state final_state, std::string error);

  bool cascading = false;  ///< ending a job's dependents (graph.hpp): not again for theirs

  /// A job that failed for good or was cancelled: the jobs waiting for its video (and for
  /// theirs) fail, or are cancelled, naming it.
  void end_dependents(const job& j, job_state how);

  /// An attempt lost to a crash or a host going down is given back, up to a bound that
  /// stops a job which itself crashes its pool every time.
  void refund_lost(job& j, uint32_t& attempts);

  /// A transient failure of the job's stage: the job just went back to queued or sampled;
  /// it waits retry_backoff_s x 2^(failures in a row - 1), at most retry_backoff_max_s,
  /// before it is ordered again (other jobs take the pool or decoder meanwhile).
  void hold_back(job& j);

  /// Back to the queue for another sampling attempt, or failed when attempts are spent.
  void requeue_sampling(job& j, const std::string& why);

  /// A job whose newest checkpoint lies on a host that is down waits for that host as a
  /// sampled latent does (latent_wait_s from when it went down), then goes on from an older
  /// checkpoint on a host that is up, or from step 0 (resume_point).
  void wait_for_checkpoint_host(job& j);

  /// Back to waiting for a decoder, or failed when attempts are spent.
  void requeue_decoding(job& j, const std::string& why);

  // -- events ------------------------------------------------------------------------------

  // stepper_admission.cpp: a client's submit checked and expanded into jobs, then
  // submitted (ev_submit) or added (ev_add_jobs); answered by an effect
  void on(const ev_submit_request& e);
  void on(const ev_add_jobs_request& e);
  /// The answer to a submit: the run made, or why it was refused (nothing recorded).
  msg::submit_reply admit(const ev_submit_request& e);
  msg::submit_jobs_reply admit(const ev_add_jobs_request& e);
  /// The first fx_accepted among the effects from index `from` on, if any.
  const fx_accepted* accepted_since(std::size_t from) const;

  // stepper_submit.cpp: runs submitted, jobs added to a run
  void on(const ev_submit& e);

  /// Jobs final when they came (coordinator::admit): reused, or naming no job of the run.
  void announce_finals(const run& r, const std::vector<uint32_t>& finals);

  void on(const ev_input_made& e);

  /// A job no pool of its mode can hold fails at once instead of waiting forever.
  void refuse_impossible(run& r);

  bool possible(const run& r, const job& j) const;

  void refuse(run& r, job& j);

  void on(const ev_add_jobs& e);

  // stepper_peers.cpp: hosts up and down, pools and decoders lost, leases
  void on(const ev_peer& e);

  /// Host `host` is back: jobs waiting for a checkpoint there (and for no transient
  /// failure's backoff) may go now.
  void end_checkpoint_waits(const std::string& host);

  /// The pool is out of service. `leased`: it may still be running (its host went silent,
  /// it was not seen to restart), so its job stays until the lease expires (expire_leases).
  void pool_lost(pool_view& p, const std::string& why, bool leased = false);

  /// The decoder is out of service. `leased`: as for pool_lost, its jobs whose lease runs
  /// stay until it expires.
  void decoder_lost(decoder_view& d, const std::string& why, bool leased = false);

  /// Stages kept for a worker out of service whose lease has now expired go elsewhere.
  void expire_leases();

  /// The grant answering a status that names `attempts`: current ones get a fresh lease.
  template <class IsCurrent>
  void grant(const std::string& host, const std::string& target, uint64_t epoch, uint64_t seq,
             const std::vector<uint64_t>& attempts, IsCurrent&& current_job) {
    if (attempts.empty())
      return;
    msg::lease_grant g;
    g.target = target.substr(target.find(':') + 1);
    g.epoch = epoch;
    g.seq = seq;
    g.lease_ms = static_cast<uint64_t>(s.p.lease_s * 1000);
    for (uint64_t a : attempts) {
      if (a == 0)
        continue;
      if (job* j = current_job(a)) {
        j->lease_until = std::max(j->lease_until, mono + s.p.lease_s);
        g.current.push_back(a);
      } else {
        g.ended.push_back(a);
        if (s.idx.cancelled_attempts.count(a) != 0)
          g.cancelled.push_back(a);
      }
    }
    fx.push_back(fx_grant{host, target, std::move(g)});
  }

  /// Jobs decoding on a decoder, in run and job order (a copy: callers change states).
  std::vector<job*> decoding_on(const std::string& decoder);

  // stepper_status.cpp: pools' and decoders' status reports
  void on(const ev_pool_status& e);

  /// Checkpoints a pool reported for job `j`'s attempt: the new ones journaled.
  void note_checkpoints(job& j, const std::vector<msg::checkpoint_ref>& cs,
                        const std::string& kind);

  std::string kind_of(const std::string& pool) const;

  void on(const ev_decoder_status& e);

  void on(const ev_verdict_indexed& e);

  // stepper_results.cpp: sampling and decode results, late ones included
  void on(const ev_sample_result& e);
  void on(const ev_decode_result& e);

  void ack(const std::string& host, const std::string& target, uint64_t attempt,
           bool discard = false);

  /// A result of an attempt other than the job's current one.
  void late_sample_result(job* j, const msg::sample_result& r);

  /// A decode result of an attempt other than the job's current one.
  void late_decode_result(job* j, const msg::decode_result& r);

  void on_sample_result(const msg::sample_result& r);

  /// Folds an ok result's sampling time into its pool's speed_factor: the seconds between
  /// its sampler's start and end stamps over what the run's policy expected of the job on
  /// that pool's kind (cold or warm, as the result says). A result without both stamps, or
  /// whose policy has no estimate, tells nothing.
  void observe_speed(const job& j, const msg::sample_result& r);

  void adopt_latent(job& j, const msg::sample_result& r);

  void on_decode_result(const msg::decode_result& r);

  // stepper_resume.cpp: failed jobs resumed, a forgotten run recalled from the journal
  void on(const ev_resume& e);

  /// A forgotten run back from the journal for a resume, behind the runs here: when it has
  /// a failed job and was not cancelled (else nothing is to be done and it stays out).
  run* recall(const run& from_journal, bool need_failed = true);

  // stepper_retention.cpp: finished runs forgotten, then dropped from the journal
  /// Retention (params::finished_run_memory_s, journal_keep_finished_s): runs finished
  /// long enough ago leave the state; those forgotten long enough ago leave the journal.
  /// Nothing of a forgotten run is referred to again: its jobs are final (no pool holds
  /// one, no order of it is out), and a late result naming one finds no job.
  void retain();

  void forget(const std::vector<std::string>& ids);

  // stepper_cancel.cpp: runs and jobs cancelled
  /// Stops job `j` (not final): queued, sampled or in flight, it is cancelled. A stage in
  /// flight is ended at once: its worker gets a grant naming the attempt ended and
  /// cancelled (it stops the backend call), again with every report that still shows it.
  void cancel_job(job& j);

  void send_cancel(const std::string& host, const std::string& target, uint64_t epoch,
                   uint64_t seq, uint64_t attempt);

  void on(const ev_cancel& e);

  // stepper_review.cpp: verdicts and other takes
  /// A verdict recorded on its job; another take added as jobs are (ev_add_jobs), the run
  /// opened again for it when it had finished (review.hpp).
  void on(const ev_review& e);

  // stepper_tick.cpp: the tick; drains, GPU health and power readings
  void on(const ev_tick&);

  void on(const ev_drain& e);
  void on(const ev_gpu_health& e);
  void on(const ev_gpu_power& e);

  // stepper_latents.cpp: the latents a host holds: kept, adopted or released
  /// Retention and re-offer (docs/dataplane.md). A latent is needed while a job that is
  /// sampled or decoding names it, or a waiting job takes it (coordinator::latents_wanted); a latent sampled for a job (its note says which) that
  /// waits for a latent again is adopted; one whose job succeeded (was decoded) or went
  /// on with another latent, or a received copy whose jobs all succeeded, is released. A
  /// latent of a failed job (resume may decode it), of a job still sampling or of a job
  /// this coordinator does not know is kept.
  void on(const ev_latent_holdings& e);

  // -- dispatch ----------------------------------------------------------------------------

  // stepper_dispatch.cpp: orders to pools and decoders; finished runs closed
  void send_sample(pool_view& p, job& j);

  void send_decode(decoder_view& d, job& j);

  bool host_up(const std::string& host) const { return s.host_up(host); }

  /// The free pools of a mode, in the mode's order.
  std::vector<uint32_t> free_in_mode(const std::string& mode);

  /// Every open run's queued jobs, by priority then submission (state_index::run_order):
  /// a run first in the queue takes the free pools it wants, the next one gets the rest.
  void dispatch_sampling();

  /// Whether job j is better left to wait for another pool than loaded on pool p, which
  /// holds another model and would take k (of p's model) instead. Loading j's model costs
  /// p the load now and, k still queued, the load back: p is through j, then k, at
  /// now + cold(j) + cold(k). Waiting, p is through k at once, warm, and j is through on
  /// another pool of the run's mode, one that will hold j's model when its current job is
  /// done (it runs a job of that model, or idles holding it), at its end + warm(j). Wait
  /// when that is no later.
  bool held_sooner_elsewhere(const run& r, const job& j, uint32_t p_id, const job& k,
                             const dispatch_policy& policy);

  /// Model affinity: a pool holds one model, and loading another costs a cold stage. When
  /// the policy sends job j to pool p and p holds another model, a free pool of p's kind
  /// that holds j's model takes j instead. Otherwise p keeps to its model while jobs of it
  /// are queued: it takes the lowest queued job of the run of j's size whose model it
  /// holds, or of any size when j is better left to another pool that will hold its model
  /// (held_sooner_elsewhere). A job passed over this way goes once it has been for
  /// params::model_wait_s, and p switches to its model, unless it is still better left to
  /// that other pool; after twice model_wait_s it goes regardless.
  void by_model(run& r, std::size_t rp, assignment& a, const std::vector<uint32_t>& free,
                const dispatch_policy& policy);

  void order_sample(run& r, std::size_t rp, job& j, pool_view& p);

  /// Decoders take latents oldest-sampled first, only against a credit.
  void dispatch_decoding();

  /// The alive decoder of the job's mode with the most credits (the first of them).
  decoder_view* pick_decoder(const job& j);

  void close_finished_runs();
};

} // namespace vidline::actors::coordinator
