#include "actors/coordinator/scheduler.hpp"
#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/drain.hpp"
#include "actors/coordinator/index.hpp"
#include "actors/coordinator/review.hpp"
#include "actors/coordinator/verdicts.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/preempt.hpp"
#include "config/shot_identity.hpp"

#include <cmath>

#include <algorithm>
#include <type_traits>
#include <unordered_map>

namespace vidline::sched {

using namespace detail;  // the index's mutators (index.hpp)

const char* to_string(job_state s) {
  switch (s) {
    case job_state::queued: return "queued";
    case job_state::sampling: return "sampling";
    case job_state::sampled: return "sampled";
    case job_state::decoding: return "decoding";
    case job_state::succeeded: return "succeeded";
    case job_state::failed: return "failed";
    case job_state::cancelled: return "cancelled";
    case job_state::waiting: return "waiting";
    case job_state::reused: return "reused";
  }
  return "unknown";
}

std::optional<job_state> job_state_from(const std::string& s) {
  for (auto st : {job_state::queued, job_state::sampling, job_state::sampled,
                  job_state::decoding, job_state::succeeded, job_state::failed,
                  job_state::cancelled, job_state::waiting, job_state::reused})
    if (s == to_string(st))
      return st;
  return std::nullopt;
}

uint32_t decoder_view::credits() const {
  std::size_t busy = holding.size();
  for (auto& [attempt, sent_at] : ordered)
    busy += holding.count(attempt) == 0 ? 1 : 0;
  return busy >= capacity ? 0 : capacity - static_cast<uint32_t>(busy);
}

const run* state::find_run(const std::string& id) const {
  if (idx.built) {
    auto it = idx.run_pos.find(id);
    if (it != idx.run_pos.end() && it->second < runs.size() && runs[it->second].id == id)
      return &runs[it->second];
  }
  for (auto& r : runs)  // a new id, or runs added since the index was built
    if (r.id == id)
      return &r;
  return nullptr;
}

run* state::find_run(const std::string& id) {
  return const_cast<run*>(static_cast<const state&>(*this).find_run(id));
}

job* state::find_job(const std::string& run_id, uint32_t index) {
  auto* r = find_run(run_id);
  if (r == nullptr || index >= r->jobs.size())
    return nullptr;
  return &r->jobs[index];
}

bool state::pool_free(const std::string& name) const {
  auto it = pools.find(name);
  if (it == pools.end())
    return false;
  const auto& p = it->second;
  if (!p.alive || !p.accepting || p.assigned || p.drained)
    return false;
  // A pool still busy with an attempt we no longer track (fenced) is not free either.
  if (p.reported_busy != 0)
    return false;
  for (auto& other : p.conflicts) {
    auto o = pools.find(other);
    if (o != pools.end() && (o->second.assigned || o->second.reported_busy != 0))
      return false;
  }
  for (auto& name : p.decoders_sharing) {
    auto d = decoders.find(name);
    if (d != decoders.end() && (!d->second.sent.empty() || !d->second.holding.empty()))
      return false;
  }
  return true;
}

bool decoder_blocked(const state& s, const decoder_view& d) {
  for (auto& name : d.shares_gpu_with) {
    auto p = s.pools.find(name);
    if (p != s.pools.end() && (p->second.assigned || p->second.reported_busy != 0))
      return true;
  }
  return false;
}

bool state::host_up(const std::string& host) const {
  auto it = hosts_up.find(host);
  return it == hosts_up.end() || it->second;
}

const dispatch_policy& state::policy_of(const std::string& mode) const {
  static const in_turn_policy in_turn;
  auto it = mode_policy.find(mode);
  return it != mode_policy.end() && it->second ? *it->second : in_turn;
}

uint64_t job_load(const msg::job_spec& j) {
  return uint64_t{j.width} * j.height * j.seconds;
}

bool pool_may_take(const pool_view& p, const job& j) {
  return j.capacity_failed.count(p.kind) == 0 && (!p.max_load || job_load(j.spec) <= *p.max_load);
}

namespace {

/// Queued jobs of a pool's model looked at per decision (model affinity): a decision's
/// cost stays bounded however long the queue is.
constexpr std::size_t max_model_scan = 64;

enum class report { stale, current, restarted };

/// Sorts a status report: stale (from a replaced epoch, or older than one already seen),
/// current, or the first of a new epoch (the actor restarted: the old epoch is retired).
template <class View>
report classify(View& v, uint64_t epoch, uint64_t seq) {
  if (v.retired.count(epoch) != 0)
    return report::stale;
  if (epoch == v.epoch) {
    if (seq != 0 && seq <= v.last_seq)
      return report::stale;
    v.last_seq = seq;
    return report::current;
  }
  if (v.epoch != 0)
    v.retired.insert(v.epoch);
  v.epoch = epoch;
  v.last_seq = seq;
  return report::restarted;
}

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

  /// A worker's unix stamp on the run clock (-1 for 0: not stamped).
  double run_of(double unix_s) const { return unix_s > 0 ? unix_s / s.p.time_scale : -1; }

  /// Makes `t` (stamps in stage order, -1 = unknown) ordered and no later than now: each
  /// known one no earlier than the known one before it, then none past the one after it.
  void order_stamps(std::vector<double*> t) const {
    double lo = -1;
    for (double* v : t)
      if (*v >= 0)
        lo = *v = std::max(*v, lo);
    double hi = now;
    for (auto it = t.rbegin(); it != t.rend(); ++it)
      if (**it >= 0)
        hi = **it = std::min(**it, hi);
  }

  /// The sampling stages of the attempt that made `r`'s latent. A result without stamps
  /// (an older pool) ends when it arrived and lasts its reported durations.
  void record_sampling(job& j, const msg::sample_result& r) {
    stage_clock c;
    c.sampler_end = run_of(r.end_unix_s);
    if (c.sampler_end < 0)
      c.sampler_end = now;
    c.sampler_start = run_of(r.sampling_start_unix_s);
    if (c.sampler_start < 0)
      c.sampler_start = c.sampler_end - r.sampling_s;
    c.pool_start = run_of(r.start_unix_s);
    if (c.pool_start < 0)
      c.pool_start = c.sampler_start - r.conditioning_s;
    order_stamps({&c.pool_start, &c.sampler_start, &c.sampler_end});
    j.ran = c;
    if (auto p = s.pools.find(r.pool); p != s.pools.end())
      j.sampling_energy_j = s.power.stage(job_name(j) + " sampling", p->second.cards,
                                          c.pool_start, c.sampler_end,
                                          running_on(p->second.cards, p->second.host, r.pool, {}));
  }

  /// The stages running now on `cards` of pools and decoders other than pool `self_pool` or
  /// decoder `self_decoder`, since their orders went out: a stage's energy is split with
  /// them. Called per result: no allocation per pool or decoder (800 pools at scale).
  std::vector<gpu::power_log::running> running_on(const std::vector<std::string>& cards,
                                                  const std::string& host,
                                                  const std::string& self_pool,
                                                  const std::string& self_decoder) const {
    std::vector<gpu::power_log::running> out;
    if (cards.empty())
      return out;
    auto add = [&](const std::vector<std::string>& theirs, double since) {
      for (auto& c : theirs)
        if (std::find(cards.begin(), cards.end(), c) != cards.end())
          out.push_back({c, since});
    };
    // Cards are "host/gpu": only pools and decoders of the same host can share one.
    for (auto& [name, p] : s.pools)
      if (p.assigned && p.ordered_at >= 0 && p.host == host && name != self_pool)
        add(p.cards, p.ordered_at);
    for (auto& [name, d] : s.decoders)
      if (!d.sent.empty() && d.host == host && name != self_decoder)
        for (auto& [attempt, since] : d.sent)
          add(d.cards, since);
    return out;
  }

  /// The decoder's stages of the attempt that made `r`'s video (as record_sampling).
  void record_decoding(job& j, const msg::decode_result& r) {
    auto& c = j.ran;
    c.decode_end = run_of(r.end_unix_s);
    if (c.decode_end < 0)
      c.decode_end = now;
    c.decode_start = run_of(r.decode_start_unix_s);
    if (c.decode_start < 0)
      c.decode_start = c.decode_end - r.decode_s;
    c.fetched = run_of(r.fetched_unix_s);
    if (c.fetched < 0)
      c.fetched = c.decode_start;
    c.fetch_start = run_of(r.start_unix_s);
    if (c.fetch_start < 0)
      c.fetch_start = c.fetched - r.handoff_s;
    if (c.decode_ordered < 0 || c.decode_ordered > c.fetch_start)
      c.decode_ordered = c.fetch_start;  // older records, or the decoder's clock behind
    order_stamps({&c.sampler_end, &c.decode_ordered, &c.fetch_start, &c.fetched,
                  &c.decode_start, &c.decode_end});
    if (auto d = s.decoders.find(r.decoder); d != s.decoders.end())
      j.decode_energy_j = s.power.stage(job_name(j) + " decode", d->second.cards,
                                        c.decode_start, c.decode_end,
                                        running_on(d->second.cards, d->second.host, {}, r.decoder));
  }

  /// Stamps of a failed result (start, end), -1 where it has none.
  std::pair<double, double> stamps_of(double start_unix, double end_unix) const {
    double a = run_of(start_unix), b = run_of(end_unix);
    if (b >= 0)
      b = std::min(b, now);
    if (a >= 0 && b >= 0)
      a = std::min(a, b);
    return {a, b};
  }
  /// The failed result being handled now, if any: its stamps for note_failure.
  std::pair<double, double> failing_stamps{-1, -1};

  /// The job's current attempt failed or was lost: kept for the status, if it was one
  /// (the job was sampling or decoding).
  /// `redone`: the stage is to run again (a sampling attempt's GPU time is paid twice);
  /// false when the job ends here (failed, cancelled).
  void note_failure(job& j, const std::string& why, bool redone = true) {
    failed_attempt f;
    if (j.state == job_state::sampling) {
      f.stage = "sampling";
      f.lane = j.pool;
    } else if (j.state == job_state::decoding) {
      f.stage = "decode";
      f.lane = j.decoder;
    } else {
      return;
    }
    f.start = failing_stamps.first >= 0 ? failing_stamps.first : j.attempt_at;
    f.end = failing_stamps.second >= 0 ? failing_stamps.second : now;
    if (f.start < 0 || f.start > f.end)
      f.start = f.end;
    f.reason = why;
    if (f.stage == "sampling" && redone) {
      // Paid twice: the job samples again from the newest checkpoint this attempt saved
      // (checkpoints.hpp), else from where the attempt began. An attempt lost without a
      // result (its host killed, stopped or cut off) is counted until its pool last
      // reported running it: a dead or stopped host does no work while the lease runs out.
      // Never reported running: until it was given up.
      auto p = s.pools.find(f.lane);
      const double from = std::clamp(kept_until(s, j), f.start, f.end);
      double until = f.end;
      if (failing_stamps.second < 0 && j.running_attempt == j.attempt && j.running_seen_at >= 0)
        until = std::clamp(j.running_seen_at, from, f.end);
      const double gpu_s = (until - from) * (p == s.pools.end() ? 1 : p->second.gpus);
      j.gpu_s_redone += gpu_s;
      s.gpu_s_redone += gpu_s;
    }
    j.failures.push_back(std::move(f));
    if (j.failures.size() > max_failures_kept)
      j.failures.erase(j.failures.begin());
    ++j.failures_total;
  }

  // -- job transitions ---------------------------------------------------------------------

  void release_pool_of(const job& j) {
    auto it = s.pools.find(j.pool);
    if (it != s.pools.end() && it->second.assigned
        && it->second.assigned->first == j.spec.run_id
        && it->second.assigned->second == j.spec.index) {
      it->second.assigned.reset();
      it->second.ordered_at = -1;
      it->second.preempt_attempt = 0;
      touch(it->first);
    }
  }

  void release_decoder_of(const job& j) {
    auto it = s.decoders.find(j.decoder);
    if (it != s.decoders.end()) {
      it->second.ordered.erase(j.attempt);
      it->second.holding.erase(j.attempt);
      it->second.sent.erase(j.attempt);
    }
  }

  void set_state(job& j, job_state to) { move_job(s, j, to); }

  /// A pool's availability changed: refresh the free-list for it and the pools sharing GPUs.
  void touch(const std::string& pool) {
    auto id = s.idx.pool_ids.find(pool);
    if (id != s.idx.pool_ids.end())
      refresh_pool(s, id->second);
  }

  void finish(job& j, job_state final_state, std::string error) {
    if (final_state == job_state::failed)
      note_failure(j, error, false);
    set_state(j, final_state);
    j.error = std::move(error);
    j.order_sent_at = -1;
    persist(j);
    fx.push_back(fx_job_final{j.spec.run_id, j.spec.index});
    if (final_state == job_state::failed)
      log(3, "job " + job_name(j) + " failed: " + j.error);
    else
      log(2, "job " + job_name(j) + " succeeded: " + j.output);
    if (final_state == job_state::succeeded)
      graph::on_output(s, j, fx, now);
    else if (final_state == job_state::failed && !cascading)
      end_dependents(j, job_state::failed);
  }

  bool cascading = false;  ///< ending a job's dependents (graph.hpp): not again for theirs

  /// A job that failed for good or was cancelled: the jobs waiting for its video (and for
  /// theirs) fail, or are cancelled, naming it.
  void end_dependents(const job& j, job_state how) {
    auto deps = graph::dependents(s, j);
    if (deps.empty())
      return;
    cascading = true;
    const std::string shot = j.spec.shot.empty() ? "" : "shot " + j.spec.shot + " ";
    for (job* d : deps) {
      if (how == job_state::cancelled)
        cancel_job(*d);
      else if (d->state == job_state::waiting)
        finish(*d, job_state::failed, "an input's source " + shot + "(job "
                                        + std::to_string(j.spec.index) + ") failed: " + j.error);
    }
    cascading = false;
  }

  /// An attempt lost to a crash or a host going down is given back, up to a bound that
  /// stops a job which itself crashes its pool every time.
  void refund_lost(job& j, uint32_t& attempts) {
    ++j.lost_attempts;
    if (attempts > 0 && j.lost_attempts <= s.p.lost_factor * s.p.max_attempts)
      --attempts;
  }

  /// A transient failure of the job's stage: the job just went back to queued or sampled;
  /// it waits retry_backoff_s x 2^(failures in a row - 1), at most retry_backoff_max_s,
  /// before it is ordered again (other jobs take the pool or decoder meanwhile).
  void hold_back(job& j) {
    ++j.retry_streak;
    if (!(s.p.retry_backoff_s > 0) || is_final(j.state))
      return;
    const double wait = std::min(
      s.p.retry_backoff_max_s,
      s.p.retry_backoff_s * std::pow(2.0, std::min<uint32_t>(j.retry_streak - 1, 30)));
    set_retry_at(s, j, std::max(j.retry_at, now + wait));
    log(1, "job " + job_name(j) + " retried after " + std::to_string(wait) + " s (failure "
             + std::to_string(j.retry_streak) + " in a row)");
  }

  /// Back to the queue for another sampling attempt, or failed when attempts are spent.
  void requeue_sampling(job& j, const std::string& why) {
    note_failure(j, why);
    set_state(j, job_state::queued);
    j.ran = stage_clock{};  // a new latent is to be made: its stages are to come
    j.order_sent_at = -1;
    j.error = why;
    j.latent_sha256.clear();
    j.latent_bytes = 0;
    j.latent_host.clear();
    if (j.sample_attempts >= s.p.max_attempts) {
      finish(j, job_state::failed,
             "sampling failed " + std::to_string(j.sample_attempts) + " times; last: " + why);
      return;
    }
    wait_for_checkpoint_host(j);
    persist(j);
    log(2, "job " + job_name(j) + " queued again: " + why
             + (j.checkpoints.empty() ? ""
                                      : " (resumes from step "
                                          + std::to_string(j.checkpoints.back().ref.step) + ")"));
  }

  /// A job whose newest checkpoint lies on a host that is down waits for that host as a
  /// sampled latent does (latent_wait_s from when it went down), then goes on from an older
  /// checkpoint on a host that is up, or from step 0 (resume_point).
  void wait_for_checkpoint_host(job& j) {
    auto* k = checkpoint_on_down_host(s, j);
    if (k == nullptr || j.state != job_state::queued)
      return;
    auto down = s.host_down_since.find(k->ref.host);
    const double since = down == s.host_down_since.end() ? now : down->second;
    if (since + s.p.latent_wait_s > now)
      set_retry_at(s, j, std::max(j.retry_at, since + s.p.latent_wait_s));
  }

  /// Back to waiting for a decoder, or failed when attempts are spent.
  void requeue_decoding(job& j, const std::string& why) {
    note_failure(j, why);
    set_state(j, job_state::sampled);
    j.order_sent_at = -1;
    j.error = why;
    if (j.decode_attempts >= s.p.max_attempts) {
      finish(j, job_state::failed,
             "decoding failed " + std::to_string(j.decode_attempts) + " times; last: " + why);
      return;
    }
    persist(j);
    log(2, "job " + job_name(j) + " waits for a decoder again: " + why);
  }

  // -- events ------------------------------------------------------------------------------

  void on(const ev_submit& e) {
    if (s.find_run(e.r.id) != nullptr)
      return;  // already known: submits are idempotent
    if (auto* before = run_of_request(s, e.r.request_id)) {
      fx.push_back(fx_accepted{before->id, 0, static_cast<uint32_t>(before->jobs.size()), true});
      return;  // a retried submit: that run
    }
    fx.push_back(fx_accepted{e.r.id, 0, static_cast<uint32_t>(e.r.jobs.size()), false});
    s.runs.push_back(e.r);
    auto& r = s.runs.back();
    r.submitted_at = now;
    const auto finals = graph::admit(s, r);
    index_run(s, s.runs.size() - 1);
    order_runs(s);
    fx.push_back(fx_persist_run{r.id});
    for (auto& j : r.jobs)
      persist(j);
    announce_finals(r, finals);
    log(2, "run " + r.id + " submitted: " + std::to_string(r.jobs.size()) + " jobs, mode "
             + r.mode);
    refuse_impossible(r);
  }

  /// Jobs final when they came (graph::admit): reused, or naming no job of the run.
  void announce_finals(const run& r, const std::vector<uint32_t>& finals) {
    for (uint32_t i : finals) {
      const auto& j = r.jobs[i];
      fx.push_back(fx_job_final{r.id, i});
      if (j.state == job_state::reused)
        log(2, "job " + job_name(j) + " reused " + j.output
                 + (j.reused_from == "collection" ? " of the collection folder" : "")
                 + " (job key " + j.spec.key + ")");
      else
        log(3, "job " + job_name(j) + " failed: " + j.error);
    }
    graph::ask_inputs(s, fx, now);
  }

  void on(const ev_input_made& e) {
    auto [j, why] = graph::on_input_made(s, e, fx, now);
    if (j != nullptr)
      finish(*j, job_state::failed, why);
  }

  /// A job no pool of its mode can hold fails at once instead of waiting forever.
  void refuse_impossible(run& r) {
    // Jobs of a run mostly share a size and have run out of memory nowhere: ask once.
    std::map<uint64_t, bool> possible_by_load;
    for (auto& j : r.jobs) {
      if (j.state != job_state::queued)
        continue;
      if (j.capacity_failed.empty()) {
        auto [it, fresh] = possible_by_load.emplace(job_load(j.spec), false);
        if (fresh)
          it->second = possible(r, j);
        if (!it->second)
          refuse(r, j);
      } else if (!possible(r, j)) {
        refuse(r, j);
      }
    }
  }

  bool possible(const run& r, const job& j) const {
    auto mode = s.modes.find(r.mode);
    if (mode != s.modes.end())
      for (auto& name : mode->second) {
        auto it = s.pools.find(name);
        if (it != s.pools.end() && pool_may_take(it->second, j))
          return true;
      }
    return false;
  }

  void refuse(run& r, job& j) {
    finish(j, job_state::failed,
           j.error.empty() ? "no pool of mode " + r.mode + " can hold this job"
                           : "capacity: no pool of mode " + r.mode
                               + " can hold this job; last: " + j.error);
  }

  void on(const ev_peer& e) {
    s.hosts_up[e.host] = e.up;
    for (auto& [name, p] : s.pools)
      if (p.host == e.host)
        touch(name);
    if (e.up) {
      s.host_down_since.erase(e.host);
      end_checkpoint_waits(e.host);
      for (auto& o : s.outages)
        if (o.host == e.host && o.to < 0)
          o.to = now;
      return;
    }
    if (s.host_down_since.emplace(e.host, now).second) {
      s.outages.push_back(outage{e.host, now, -1});
      if (s.outages.size() > max_outages_kept)
        s.outages.pop_front();
    }
    log(3, "host " + e.host + " is down");
    for (auto& [name, p] : s.pools)
      if (p.host == e.host)
        pool_lost(p, "host " + e.host + " went down", true);
    for (auto& [name, d] : s.decoders)
      if (d.host == e.host)
        decoder_lost(d, "host " + e.host + " went down", true);
  }

  /// Host `host` is back: jobs waiting for a checkpoint there (and for no transient
  /// failure's backoff) may go now.
  void end_checkpoint_waits(const std::string& host) {
    std::vector<job*> due;
    for (auto& [t, rp, ji] : s.idx.backoff) {
      auto& j = s.runs[rp].jobs[ji];
      if (j.state == job_state::queued && j.retry_streak == 0 && !j.checkpoints.empty()
          && j.checkpoints.back().ref.host == host)
        due.push_back(&j);
    }
    for (auto* j : due)
      set_retry_at(s, *j, -1);
  }

  /// The pool is out of service. `leased`: it may still be running (its host went silent,
  /// it was not seen to restart), so its job stays until the lease expires (expire_leases).
  void pool_lost(pool_view& p, const std::string& why, bool leased = false) {
    p.alive = false;
    p.reported_busy = 0;
    p.warm = false;
    touch(p.name);
    if (!p.assigned) {
      p.ordered_at = -1;
      return;
    }
    auto* j = s.find_job(p.assigned->first, p.assigned->second);
    if (leased && j != nullptr && j->state == job_state::sampling && j->pool == p.name
        && mono < j->lease_until) {
      log(2, "job " + job_name(*j) + " stays with pool " + p.name + " until its lease ends in "
               + std::to_string(j->lease_until - mono) + " s: " + why);
      return;
    }
    p.ordered_at = -1;
    p.assigned.reset();
    touch(p.name);
    if (j != nullptr && j->state == job_state::sampling && j->pool == p.name) {
      refund_lost(*j, j->sample_attempts);
      requeue_sampling(*j, "pool " + p.name + ": " + why);
    }
  }

  /// The decoder is out of service. `leased`: as for pool_lost, its jobs whose lease runs
  /// stay until it expires.
  void decoder_lost(decoder_view& d, const std::string& why, bool leased = false) {
    d.alive = false;
    std::set<uint64_t> lost = d.holding;
    for (auto& [a, t] : d.ordered)
      lost.insert(a);
    std::set<uint64_t> kept;
    for (auto* jp : decoding_on(d.name)) {
      auto& j = *jp;
      if (!(j.state == job_state::decoding && j.decoder == d.name && lost.count(j.attempt)))
        continue;
      if (leased && mono < j.lease_until) {
        kept.insert(j.attempt);
        log(2, "job " + job_name(j) + " stays with decoder " + d.name
                 + " until its lease ends in " + std::to_string(j.lease_until - mono) + " s: "
                 + why);
        continue;
      }
      release_decoder_of(j);
      refund_lost(j, j.decode_attempts);
      requeue_decoding(j, "decoder " + d.name + ": " + why);
    }
    auto keep_only = [&](auto& m) {
      for (auto it = m.begin(); it != m.end();) {
        const uint64_t a = [&] {
          if constexpr (std::is_same_v<std::decay_t<decltype(*it)>, uint64_t>)
            return *it;
          else
            return it->first;
        }();
        it = kept.count(a) ? std::next(it) : m.erase(it);
      }
    };
    keep_only(d.holding);
    keep_only(d.ordered);
    keep_only(d.sent);
  }

  /// Stages kept for a worker out of service whose lease has now expired go elsewhere.
  void expire_leases() {
    for (auto& [name, p] : s.pools) {
      if (p.alive || !p.assigned)
        continue;
      auto* j = s.find_job(p.assigned->first, p.assigned->second);
      if (j == nullptr || j->state != job_state::sampling || j->pool != name)
        continue;
      if (mono >= j->lease_until)
        pool_lost(p, "its lease expired while it was out of service");
    }
    for (auto& [name, d] : s.decoders) {
      if (d.alive)
        continue;
      bool expired = false;
      for (auto* j : decoding_on(name))
        if (j->decoder == name && mono >= j->lease_until)
          expired = true;
      if (expired)
        decoder_lost(d, "its lease expired while it was out of service", true);
    }
  }

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

  void on(const ev_pool_status& e) {
    auto it = s.pools.find(e.s.pool);
    if (it == s.pools.end()) {
      log(3, "status from unknown pool " + e.s.pool + " ignored");
      return;
    }
    auto& p = it->second;
    bool had_epoch = p.epoch != 0;
    auto kind = classify(p, e.s.epoch, e.s.seq);
    if (kind == report::stale)
      return;
    if (kind == report::restarted && had_epoch)
      pool_lost(p, "pool restarted");
    if (kind == report::restarted) {
      p.warm = false;
      p.speed_factor = 1;  // a restarted worker is observed afresh
      p.speed_observed = 0;
    }
    p.alive = host_up(p.host);
    p.accepting = e.s.accepting;
    p.reported_busy = e.s.busy_attempt;
    p.reported_model = e.s.model;
    p.reported_identity = e.s.model_identity;
    // A pool that loaded its model before any job (warm start) says so in its status: it is
    // warm for that model. Not for pools sharing GPUs, whose models others evict unseen.
    if (!p.warm && !e.s.model.empty() && e.s.busy_attempt == 0 && !p.assigned
        && p.conflicts.empty() && p.decoders_sharing.empty()) {
      p.warm = true;
      p.model = e.s.model;
    }
    p.last_status = now;
    if (p.assigned && e.s.busy_attempt != 0)
      if (auto* j = s.find_job(p.assigned->first, p.assigned->second);
          j != nullptr && j->attempt == e.s.busy_attempt) {
        j->running_attempt = e.s.busy_attempt;
        j->running_seen_at = now;
      }
    if (p.assigned && e.s.busy_attempt != 0 && e.s.steps > 0)
      if (auto* j = s.find_job(p.assigned->first, p.assigned->second);
          j != nullptr && j->attempt == e.s.busy_attempt) {
        j->progress_attempt = e.s.busy_attempt;
        j->progress_step = e.s.step;
        j->progress_steps = e.s.steps;
      }
    if (p.assigned && e.s.busy_attempt != 0 && !e.s.checkpoints.empty())
      if (auto* j = s.find_job(p.assigned->first, p.assigned->second);
          j != nullptr && j->attempt == e.s.busy_attempt && j->state == job_state::sampling)
        note_checkpoints(*j, e.s.checkpoints, p.kind);
    touch(p.name);
    for (auto& r : e.s.unacked)
      on_sample_result(r);
    // An order the pool has not shown (neither running nor finished) was lost on the way.
    if (p.assigned) {
      auto* j = s.find_job(p.assigned->first, p.assigned->second);
      if (j != nullptr && j->state == job_state::sampling && e.s.busy_attempt != j->attempt
          && now - j->order_sent_at >= s.p.order_resend_s)
        send_sample(p, *j);
    }
    const std::size_t before = fx.size();
    grant(p.host, "pool:" + p.name, e.s.epoch, e.s.seq,
          e.s.busy_attempt == 0 ? std::vector<uint64_t>{} : std::vector<uint64_t>{e.s.busy_attempt},
          [&](uint64_t a) -> job* {
            if (!p.assigned)
              return nullptr;
            auto* j = s.find_job(p.assigned->first, p.assigned->second);
            return j != nullptr && j->state == job_state::sampling && j->attempt == a
                       && j->pool == p.name
                     ? j
                     : nullptr;
          });
    // A preemption asked of the attempt is repeated in every grant while it runs.
    if (p.preempt_attempt != 0 && fx.size() > before)
      if (auto* g = std::get_if<fx_grant>(&fx.back()))
        if (std::find(g->grant.current.begin(), g->grant.current.end(), p.preempt_attempt)
            != g->grant.current.end())
          g->grant.preempt.push_back(p.preempt_attempt);
  }

  /// Checkpoints a pool reported for job `j`'s attempt: the new ones journaled.
  void note_checkpoints(job& j, const std::vector<msg::checkpoint_ref>& cs,
                        const std::string& kind) {
    bool changed = false;
    for (auto& c : cs)
      changed = note_checkpoint(j, c, kind, fx) || changed;
    if (changed)
      persist(j);
  }

  std::string kind_of(const std::string& pool) const {
    auto it = s.pools.find(pool);
    return it == s.pools.end() ? std::string() : it->second.kind;
  }

  void on(const ev_decoder_status& e) {
    auto it = s.decoders.find(e.s.decoder);
    if (it == s.decoders.end()) {
      log(3, "status from unknown decoder " + e.s.decoder + " ignored");
      return;
    }
    auto& d = it->second;
    bool had_epoch = d.epoch != 0;
    auto kind = classify(d, e.s.epoch, e.s.seq);
    if (kind == report::stale)
      return;
    if (kind == report::restarted && had_epoch)
      decoder_lost(d, "decoder restarted");
    d.alive = host_up(d.host);
    d.capacity = std::max<uint32_t>(1, std::min<uint32_t>(e.s.capacity, 2));
    d.last_status = now;
    d.pending = e.s.pending;
    d.fenced = e.s.fenced;
    d.unacked = static_cast<uint32_t>(e.s.unacked.size());
    d.holding = std::set<uint64_t>(e.s.holding.begin(), e.s.holding.end());
    for (auto& r : e.s.unacked)
      on_decode_result(r);
    // Orders now shown as held are no longer "on the way"; orders missing for too long
    // were lost and go again.
    for (auto o = d.ordered.begin(); o != d.ordered.end();) {
      if (d.holding.count(o->first)) {
        o = d.ordered.erase(o);
        continue;
      }
      ++o;
    }
    // An order neither held nor finished was lost on the way (or its decoder restarted
    // before taking it): after order_resend_s it goes again; the decoder ignores duplicates.
    for (auto* j : decoding_on(d.name))
      if (j->state == job_state::decoding && j->decoder == d.name
          && d.holding.count(j->attempt) == 0 && now - j->order_sent_at >= s.p.order_resend_s)
        send_decode(d, *j);
    std::map<uint64_t, job*> current;
    for (auto* j : decoding_on(d.name))
      if (j->state == job_state::decoding && j->decoder == d.name)
        current[j->attempt] = j;
    grant(d.host, "decoder:" + d.name, e.s.epoch, e.s.seq, e.s.holding, [&](uint64_t a) -> job* {
      auto it = current.find(a);
      return it == current.end() ? nullptr : it->second;
    });
    send_due_verdicts(s, d, now, fx);
  }

  void on(const ev_verdict_indexed& e) { apply_verdict_indexed(s, e, now, fx); }

  void on(const ev_sample_result& e) { on_sample_result(e.r); }
  void on(const ev_decode_result& e) { on_decode_result(e.r); }

  void ack(const std::string& host, const std::string& target, uint64_t attempt,
           bool discard = false) {
    fx.push_back(fx_ack{host, target, attempt, discard});
  }

  /// A result of an attempt other than the job's current one.
  void late_sample_result(job* j, const msg::sample_result& r) {
    if (j == nullptr)
      ++s.unknown_job_results;  // a forgotten run's (or no run's): acknowledged, no more
    if (j != nullptr && j->state == job_state::cancelled) {
      // Stopped by the user: whatever the attempt made is not the job's (its latent, if
      // any, is released when its host reports it).
      return ack(r.host, "pool:" + r.pool, r.attempt);
    }
    if (j != nullptr && !r.checkpoints.empty()
        && (j->state == job_state::queued || j->state == job_state::sampling))
      note_checkpoints(*j, r.checkpoints, kind_of(r.pool));
    if (j != nullptr && r.attempt != j->latent_attempt) {
      if (r.outcome == msg::outcome::fenced) {
        if (j->counted_attempts.insert(r.attempt).second) {
          ++j->fenced;
          persist(*j);
        }
      } else if (r.outcome == msg::outcome::ok) {
        if (j->state == job_state::queued || j->state == job_state::sampling) {
          // Latents are content-addressed and deterministic: paying twice helps no one.
          // A current attempt elsewhere is given up on (its grant says so): fenced.
          if (j->state == job_state::sampling)
            release_pool_of(*j);
          adopt_latent(*j, r);
          log(2, "job " + job_name(*j) + " adopted a late latent from " + r.pool);
        } else if (r.host != j->latent_host && j->counted_attempts.insert(r.attempt).second) {
          ++j->duplicates;
          persist(*j);
          log(3, "job " + job_name(*j) + " was sampled twice: attempt "
                   + std::to_string(r.attempt) + " on pool " + r.pool
                   + " finished after the stage went to another attempt");
        }
      }
    }
    ack(r.host, "pool:" + r.pool, r.attempt);
  }

  /// A decode result of an attempt other than the job's current one.
  void late_decode_result(job* j, const msg::decode_result& r) {
    const std::string target = "decoder:" + r.decoder;
    if (j == nullptr)
      ++s.unknown_job_results;
    // The job's own attempt, resent after it was handled; or cancelled. (Its own attempt's
    // video while the job waits again, its decoder's lease having run out, is adopted below.)
    const bool waiting = j != nullptr && (j->state == job_state::queued
                                          || j->state == job_state::sampled
                                          || j->state == job_state::sampling);
    if (j == nullptr || (r.attempt == j->attempt && !waiting) || j->state == job_state::cancelled)
      return ack(r.host, target, r.attempt);
    if (r.outcome == msg::outcome::fenced) {
      if (j->counted_attempts.insert(r.attempt).second) {
        ++j->fenced;
        persist(*j);
      }
      return ack(r.host, target, r.attempt);
    }
    if (r.outcome != msg::outcome::ok)
      return ack(r.host, target, r.attempt);
    if (j->state == job_state::succeeded) {
      auto winner = s.decoders.find(j->decoder);
      const bool same_file = winner != s.decoders.end() && winner->second.host == r.host
                             && j->output == r.output;
      if (same_file)
        return ack(r.host, target, r.attempt);
      if (j->counted_attempts.insert(r.attempt).second) {
        ++j->duplicates;
        ++j->retracted;
        persist(*j);
      }
      log(3, "job " + job_name(*j) + " was decoded twice: attempt " + std::to_string(r.attempt)
               + " on decoder " + r.decoder + " (host " + r.host + ") published " + r.output
               + " after " + j->decoder + "'s video was published; that one is retracted");
      return ack(r.host, target, r.attempt, true);
    }
    if (j->state == job_state::failed || j->state == job_state::reused)
      return ack(r.host, target, r.attempt);
    // The job still waits for a video and this one is made: it is the job's. A current
    // attempt elsewhere is given up on (its grant says so) and its video removed.
    if (j->state == job_state::decoding)
      release_decoder_of(*j);
    if (j->state == job_state::sampling)
      release_pool_of(*j);
    log(2, "job " + job_name(*j) + " adopted the video of attempt " + std::to_string(r.attempt)
             + " from decoder " + r.decoder + ", which finished after the stage moved");
    j->order_sent_at = -1;
    if (!r.latent_sha256.empty()) {
      // Queued again meanwhile (its latent's host went down): the video is of this latent.
      j->latent_sha256 = r.latent_sha256;
      j->latent_bytes = r.latent_bytes;
      j->latent_host = r.latent_host;
    }
    j->output = r.output;
    j->output_sha256 = r.output_sha256;
    j->handoff_s = r.handoff_s;
    j->decode_s = r.decode_s;
    j->decode_end = now;
    record_decoding(*j, r);
    finish(*j, job_state::succeeded, "");  // leaves the index under its old decoder
    j->attempt = r.attempt;
    j->decoder = r.decoder;
    graph::on_output(s, *j, fx, now);  // its key now names the decoder that holds it
    ack(r.host, target, r.attempt);
  }

  void on_sample_result(const msg::sample_result& r) {
    auto* j = s.find_job(r.run_id, r.index);
    if (j == nullptr || j->attempt != r.attempt || j->state != job_state::sampling)
      return late_sample_result(j, r);  // late or duplicate: fenced
    release_pool_of(*j);
    j->order_sent_at = -1;
    failing_stamps = stamps_of(r.start_unix_s, r.end_unix_s);
    if (!r.checkpoints.empty())
      note_checkpoints(*j, r.checkpoints, kind_of(r.pool));
    if (!r.bad_checkpoint.empty()) {
      drop_checkpoint(*j, r.bad_checkpoint, fx);
      log(3, "job " + job_name(*j) + ": checkpoint " + r.bad_checkpoint + " did not verify on "
               + r.pool + ": dropped, the one before it is used");
    }
    if (r.outcome == msg::outcome::ok || r.outcome == msg::outcome::capacity)
      if (auto it = s.pools.find(r.pool); it != s.pools.end()) {
        it->second.warm = true;  // the job's model stayed loaded
        it->second.model = j->spec.model;
      }
    if (r.outcome == msg::outcome::ok) {
      observe_speed(*j, r);
      adopt_latent(*j, r);
    } else if (r.outcome == msg::outcome::preempted) {
      // Made way for a job of a higher priority: not the job's fault, no backoff; it
      // resumes from the checkpoint it saved when a pool is free for it again.
      if (j->sample_attempts > 0)
        --j->sample_attempts;
      ++j->preemptions;
      requeue_sampling(*j, "preempted on pool " + r.pool + " for a job of a higher priority");
    } else if (r.outcome == msg::outcome::capacity) {
      auto it = s.pools.find(r.pool);
      if (it != s.pools.end())
        j->capacity_failed.insert(it->second.kind);
      restart_from_zero(*j, s.next_attempt, fx);  // a bigger kind: another layout
      note_failure(*j, "capacity on pool " + r.pool + ": " + r.error);
      set_state(*j, job_state::queued);
      j->error = "capacity on pool " + r.pool + ": " + r.error;
      persist(*j);
      log(3, "job " + job_name(*j) + " does not fit pool " + r.pool + ": " + r.error);
      // Only this job's limits changed: the rest of its run was checked before.
      if (auto* run = s.find_run(r.run_id); run != nullptr && !possible(*run, *j))
        refuse(*run, *j);
    } else if (r.outcome == msg::outcome::transient) {
      requeue_sampling(*j, "pool " + r.pool + ": " + r.error);
      hold_back(*j);
    } else {
      finish(*j, job_state::failed, "pool " + r.pool + ": " + r.error);
    }
    failing_stamps = {-1, -1};
    ack(r.host, "pool:" + r.pool, r.attempt);
  }

  /// Folds an ok result's sampling time into its pool's speed_factor: the seconds between
  /// its sampler's start and end stamps over what the run's policy expected of the job on
  /// that pool's kind (cold or warm, as the result says). A result without both stamps, or
  /// whose policy has no estimate, tells nothing.
  void observe_speed(const job& j, const msg::sample_result& r) {
    auto p = s.pools.find(r.pool);
    const run* rr = s.find_run(r.run_id);
    if (p == s.pools.end() || rr == nullptr || r.sampling_start_unix_s <= 0
        || r.end_unix_s < r.sampling_start_unix_s)
      return;
    auto expected = s.policy_of(rr->mode).expected_sampling(p->second.kind, j.spec, r.cold);
    if (!expected || !(*expected > 0))
      return;
    double observed = (r.end_unix_s - r.sampling_start_unix_s) / s.p.time_scale;
    double ratio = std::clamp(observed / *expected, speed_min, speed_max);
    auto& v = p->second;
    // From 1 (the estimate) on: one odd result moves the factor at most half way.
    v.speed_factor = std::clamp(speed_weight * ratio + (1 - speed_weight) * v.speed_factor,
                                speed_min, speed_max);
    ++v.speed_observed;
  }

  void adopt_latent(job& j, const msg::sample_result& r) {
    j.latent_attempt = r.attempt;
    j.latent_sha256 = r.latent_sha256;
    j.latent_bytes = r.latent_bytes;
    j.latent_host = r.host;
    j.pool = r.pool;
    j.cold = r.cold;
    j.sampled_model = r.model;
    j.model_identity = r.model_identity;
    j.conditioning_s = r.conditioning_s;
    j.sampling_s = r.sampling_s;
    if (auto p = s.pools.find(r.pool); p != s.pools.end()) {
      j.pool_kind = p->second.kind;
      j.encoder_kind = p->second.encoder_kind;
    }
    j.sample_end = now;  // the decode order's key: set before entering `sampled`
    j.retry_streak = 0;  // its stage went through
    release_checkpoints(j, fx);  // its latent is made: nothing resumes from them
    record_sampling(j, r);
    set_state(j, job_state::sampled);
    j.error.clear();
    persist(j);
  }

  void on_decode_result(const msg::decode_result& r) {
    auto* j = s.find_job(r.run_id, r.index);
    if (j == nullptr || j->attempt != r.attempt || j->state != job_state::decoding)
      return late_decode_result(j, r);  // late or duplicate: fenced
    release_decoder_of(*j);
    j->order_sent_at = -1;
    j->handoff_s = r.handoff_s;
    j->decode_s = r.decode_s;
    failing_stamps = stamps_of(r.start_unix_s, r.end_unix_s);
    if (auto d = s.decoders.find(r.decoder); d != s.decoders.end()) {
      j->decoder_kind = d->second.kind;
      j->handoff_same_host = d->second.host == j->latent_host;
    }
    if (r.outcome == msg::outcome::ok) {
      j->output = r.output;
      j->output_sha256 = r.output_sha256;
      j->decode_end = now;
      record_decoding(*j, r);
      finish(*j, job_state::succeeded, "");
    } else if (r.outcome == msg::outcome::corrupt) {
      ++j->corrupt_handoffs;
      if (j->corrupt_handoffs >= s.p.handoff_retries)
        finish(*j, job_state::failed,
               "latent " + j->latent_sha256 + " failed verification "
                 + std::to_string(j->corrupt_handoffs) + " times (quarantined): " + r.error);
      else
        requeue_decoding(*j, "latent did not verify: " + r.error);
    } else if (r.outcome == "not_found") {
      requeue_sampling(*j, "latent gone from " + j->latent_host + ": " + r.error);
    } else if (r.outcome == msg::outcome::transient && r.stage == "handoff") {
      // The latent's host restarted or the link failed: not the decoder's fault. A latent
      // that keeps failing to move is made again instead.
      ++j->handoff_failures;
      if (j->handoff_failures > s.p.lost_factor * s.p.max_attempts) {
        requeue_sampling(*j, "latent could not be moved from " + j->latent_host + ": " + r.error);
      } else {
        refund_lost(*j, j->decode_attempts);
        requeue_decoding(*j, "handoff from " + j->latent_host + ": " + r.error);
        hold_back(*j);
      }
    } else if (r.outcome == msg::outcome::transient) {
      requeue_decoding(*j, "decoder " + r.decoder + ": " + r.error);
      hold_back(*j);
    } else {
      finish(*j, job_state::failed, "decoder " + r.decoder + ": " + r.error);
    }
    failing_stamps = {-1, -1};
    ack(r.host, "decoder:" + r.decoder, r.attempt);
  }

  void on(const ev_resume& e) {
    auto* r = s.find_run(e.run_id);
    if (r == nullptr && e.recalled && e.recalled->id == e.run_id)
      r = recall(*e.recalled);
    if (r == nullptr || r->cancelled)
      return;
    int reopened = 0;
    for (auto& j : r->jobs) {
      if (j.state != job_state::failed)
        continue;
      j.sample_attempts = j.decode_attempts = j.corrupt_handoffs = 0;
      j.lost_attempts = j.handoff_failures = 0;
      j.error.clear();
      const bool waits = !config::inputs_known(j.spec);
      set_state(j, waits ? job_state::waiting
                         : (!j.latent_sha256.empty() && !j.latent_host.empty()) ? job_state::sampled
                                                                                : job_state::queued);
      persist(j);
      ++reopened;
    }
    if (reopened == 0)
      return;
    r->done = false;
    r->finished_at = -1;
    fx.push_back(fx_persist_run{r->id});
    log(2, "run " + r->id + ": " + std::to_string(reopened) + " failed jobs resumed");
    graph::refresh_due(s, s.idx.run_pos.at(r->id));
    graph::ask_inputs(s, fx, now);
    refuse_impossible(*r);
  }

  /// A forgotten run back from the journal for a resume, behind the runs here: when it has
  /// a failed job and was not cancelled (else nothing is to be done and it stays out).
  run* recall(const run& from_journal, bool need_failed = true) {
    if (from_journal.cancelled || from_journal.jobs.empty())
      return nullptr;
    bool any_failed = false;
    for (std::size_t i = 0; i < from_journal.jobs.size(); ++i) {
      const auto& j = from_journal.jobs[i];
      if (j.spec.index != i || j.spec.run_id != from_journal.id || !is_final(j.state))
        return nullptr;  // not a finished run as this machine forgot it
      any_failed = any_failed || j.state == job_state::failed;
    }
    if (need_failed && !any_failed)
      return nullptr;
    for (auto it = s.journaled.begin(); it != s.journaled.end();)
      it = it->second == from_journal.id ? s.journaled.erase(it) : std::next(it);
    s.runs.push_back(from_journal);
    index_run(s, s.runs.size() - 1);
    order_runs(s);
    log(2, "run " + from_journal.id + " recalled from the journal");
    return &s.runs.back();
  }

  /// Retention (params::finished_run_memory_s, journal_keep_finished_s): runs finished
  /// long enough ago leave the state; those forgotten long enough ago leave the journal.
  /// Nothing of a forgotten run is referred to again: its jobs are final (no pool holds
  /// one, no order of it is out), and a late result naming one finds no job.
  void retain() {
    if (s.p.finished_run_memory_s >= 0) {
      std::vector<std::string> gone;
      // A verdict its video's host has not confirmed keeps its run here, to be sent again.
      const auto held = runs_with_verdicts_due(s);
      for (std::size_t rp = 0; rp < s.runs.size(); ++rp) {
        const auto& r = s.runs[rp];
        const double at = r.finished_at >= 0 ? r.finished_at : r.submitted_at;
        if (r.done && s.idx.runs[rp].unfinished == 0 && now - at >= s.p.finished_run_memory_s
            && held.count(r.id) == 0)
          gone.push_back(r.id);
      }
      if (!gone.empty())
        forget(gone);
    }
    if (s.p.journal_keep_finished_s < 0 || s.journaled.empty())
      return;
    fx_drop_runs drop;
    while (!s.journaled.empty()
           && now - s.journaled.begin()->first >= s.p.journal_keep_finished_s) {
      drop.run_ids.push_back(s.journaled.begin()->second);
      s.journaled.erase(s.journaled.begin());
    }
    if (drop.run_ids.empty())
      return;
    log(2, std::to_string(drop.run_ids.size()) + " finished runs leave the journal");
    fx.push_back(std::move(drop));
  }

  void forget(const std::vector<std::string>& ids) {
    const std::set<std::string> gone(ids.begin(), ids.end());
    std::deque<run> kept;
    for (auto& r : s.runs) {
      if (gone.count(r.id) == 0) {
        kept.push_back(std::move(r));
        continue;
      }
      for (auto& [name, p] : s.pools)
        if (p.assigned && p.assigned->first == r.id) {
          p.assigned.reset();  // a final job's: nothing runs for it
          p.ordered_at = -1;
        }
      s.forgotten_jobs[r.mode] += r.jobs.size();
      graph::remember_outputs(s, r);
      if (s.p.journal_keep_finished_s >= 0)
        s.journaled.emplace(r.finished_at >= 0 ? r.finished_at : r.submitted_at, r.id);
      ++s.runs_forgotten;
      log(1, "run " + r.id + " forgotten (finished; the journal holds it)");
    }
    s.runs = std::move(kept);
    // Positions moved: the index is rebuilt (at most once a tick, over the runs kept).
    reindex(s);
  }

  /// Stops job `j` (not final): queued, sampled or in flight, it is cancelled. A stage in
  /// flight is ended at once: its worker gets a grant naming the attempt ended and
  /// cancelled (it stops the backend call), again with every report that still shows it.
  void cancel_job(job& j) {
    const job_state was = j.state;
    if (was == job_state::sampling) {
      auto it = s.pools.find(j.pool);
      release_pool_of(j);
      if (it != s.pools.end() && it->second.epoch != 0) {
        // Until its report shows it idle the pool stays busy (reported_busy): no order
        // goes to a GPU that is still stopping.
        if (it->second.reported_busy == 0)
          it->second.reported_busy = j.attempt;
        touch(it->first);
        send_cancel(it->second.host, "pool:" + it->first, it->second.epoch,
                    it->second.last_seq, j.attempt);
      }
    } else if (was == job_state::decoding) {
      auto it = s.decoders.find(j.decoder);
      if (it != s.decoders.end()) {
        // Not on the way any more; still held (no credit) until its report says it let go.
        it->second.ordered.erase(j.attempt);
        it->second.sent.erase(j.attempt);
      }
      if (it != s.decoders.end() && it->second.epoch != 0)
        send_cancel(it->second.host, "decoder:" + it->first, it->second.epoch,
                    it->second.last_seq, j.attempt);
    }
    if (was == job_state::waiting)
      for (auto it = s.idx.inputs_due.begin(); it != s.idx.inputs_due.end(); ++it)
        if (s.runs[it->first].id == j.spec.run_id && it->second == j.spec.index) {
          s.idx.inputs_due.erase(it);
          break;
        }
    if (was == job_state::sampling || was == job_state::decoding) {
      s.idx.cancelled_attempts.insert(j.attempt);
      note_failure(j, "cancelled", false);  // the stage cut short, for the status and its chart
    }
    const bool had_latent = !j.latent_sha256.empty() && !j.latent_host.empty();
    set_state(j, job_state::cancelled);
    j.order_sent_at = -1;
    j.error = "cancelled";
    persist(j);
    fx.push_back(fx_job_final{j.spec.run_id, j.spec.index});
    if (had_latent && (was == job_state::sampled || was == job_state::decoding))
      fx.push_back(fx_release{j.latent_host, {j.latent_sha256}});
    release_checkpoints(j, fx);
    log(2, "job " + job_name(j) + " cancelled (was " + to_string(was) + ")");
    if (!cascading)
      end_dependents(j, job_state::cancelled);
  }

  void send_cancel(const std::string& host, const std::string& target, uint64_t epoch,
                   uint64_t seq, uint64_t attempt) {
    msg::lease_grant g;
    g.target = target.substr(target.find(':') + 1);
    g.epoch = epoch;
    g.seq = seq;
    g.lease_ms = static_cast<uint64_t>(s.p.lease_s * 1000);
    g.ended.push_back(attempt);
    g.cancelled.push_back(attempt);
    fx.push_back(fx_grant{host, target, std::move(g)});
  }

  void on(const ev_cancel& e) {
    auto* r = s.find_run(e.run_id);
    if (r == nullptr)
      return;
    if (e.job && *e.job >= r->jobs.size())
      return;
    uint32_t n = 0;
    for (auto& j : r->jobs) {
      if (e.job && j.spec.index != *e.job)
        continue;
      if (is_final(j.state))
        continue;
      cancel_job(j);
      ++n;
    }
    if (!e.job && !r->cancelled) {
      r->cancelled = true;
      fx.push_back(fx_persist_run{r->id});
    }
    log(2, "run " + r->id + ": " + std::to_string(n) + " jobs cancelled"
             + (e.job ? " (job " + std::to_string(*e.job) + ")" : ""));
  }

  void on(const ev_add_jobs& e) {
    auto* r = s.find_run(e.run_id);
    if (r == nullptr)
      return;
    const auto count = static_cast<uint32_t>(e.jobs.size());
    if (!e.request_id.empty())
      if (auto it = r->added_requests.find(e.request_id); it != r->added_requests.end()) {
        fx.push_back(fx_accepted{r->id, it->second, count, true});  // added before
        return;
      }
    if (r->done || r->cancelled || e.jobs.empty())
      return;
    const uint32_t first = static_cast<uint32_t>(r->jobs.size());
    if (!e.request_id.empty())
      r->added_requests[e.request_id] = first;  // journaled with the run
    fx.push_back(fx_accepted{r->id, first, count, false});
    for (auto j : e.jobs) {
      j.spec.run_id = r->id;
      j.spec.index = static_cast<uint32_t>(r->jobs.size());
      for (auto& in : j.spec.inputs)  // taken from a shot added with it: indexes move up
        if (in.from_index >= 0)
          in.from_index += first;
      j.state = job_state::queued;
      r->jobs.push_back(std::move(j));
    }
    const auto finals = graph::admit(s, *r, first);
    // The later runs' turns move on: the index is rebuilt (a rare, user-driven event).
    reindex(s);
    r = s.find_run(e.run_id);
    for (uint32_t i = first; i < r->jobs.size(); ++i)
      persist(r->jobs[i]);
    announce_finals(*r, finals);
    fx.push_back(fx_persist_run{r->id});
    log(2, "run " + r->id + ": " + std::to_string(r->jobs.size() - first) + " jobs added");
    refuse_impossible(*r);
  }

  /// A verdict recorded on its job; another take added as jobs are (ev_add_jobs), the run
  /// opened again for it when it had finished (review.hpp).
  void on(const ev_review& e) {
    run* r = s.find_run(e.run_id);
    const bool recalled = r == nullptr && e.recalled && e.recalled->id == e.run_id
                          && !e.recalled->cancelled;
    if (r == nullptr && !recalled) {
      fx.push_back(fx_review_answer{"no run " + e.run_id, "no_such_run", "", -1, 0});
      return;
    }
    // Checked first: a verdict refused leaves a forgotten run where it is.
    auto plan = plan_review(recalled ? *e.recalled : *r, e);
    if (!plan.error.empty()) {
      fx.push_back(fx_review_answer{plan.error, plan.code, "", -1, 0});
      return;
    }
    if (recalled && (r = recall(*e.recalled, false)) == nullptr) {
      fx.push_back(fx_review_answer{"run " + e.run_id + " is not a finished run in the journal",
                                    "not_reviewable", "", -1, 0});
      return;
    }
    const std::string id = r->id;
    const std::string verdict_was = r->jobs[e.index].verdict;
    const int64_t take_was = r->jobs[e.index].retake;
    r->jobs[e.index].verdict = plan.verdict;
    persist(r->jobs[e.index]);
    if (plan.take) {
      if (r->done) {  // open again for the take (as a resume opens it)
        r->done = false;
        r->finished_at = -1;
      }
      on(ev_add_jobs{id, {*plan.take}, ""});
      r = s.find_run(id);
      r->jobs[e.index].retake = static_cast<int64_t>(r->jobs.size()) - 1;
      persist(r->jobs[e.index]);
    }
    auto& j = r->jobs[e.index];
    // A new verdict or take (the same again changes nothing): timed, and on its way to the
    // run index on the video's host (verdicts.hpp), journaled first.
    if (j.verdict != verdict_was || j.retake != take_was) {
      j.reviewed_at = now;
      verdict_given(s, j, now, fx);
    }
    fx.push_back(fx_review_answer{"", "", j.verdict, j.retake,
                                  j.retake >= 0 ? r->jobs[j.retake].spec.seed : 0});
    log(2, "run " + id + ": job " + std::to_string(e.index) + " " + j.verdict
             + (plan.take ? ", another take added as job " + std::to_string(j.retake) : ""));
  }

  void on(const ev_tick&) {
    retain();
    graph::ask_inputs(s, fx, now);
    expire_leases();
    // Latents on a host that stays down are sampled again elsewhere (in job order).
    if (s.host_down_since.empty())
      return;
    std::vector<std::pair<std::size_t, uint32_t>> gone;
    auto check = [&](std::size_t rp, uint32_t ji) {
      auto& j = s.runs[rp].jobs[ji];
      auto down = s.host_down_since.find(j.latent_host);
      if (down != s.host_down_since.end() && now - down->second >= s.p.latent_wait_s)
        gone.emplace_back(rp, ji);
    };
    for (auto& [t, rp, ji] : s.idx.sampled)
      check(rp, ji);
    for (auto& [t, rp, ji] : s.idx.backoff)
      if (s.runs[rp].jobs[ji].state == job_state::sampled)
        check(rp, ji);
    std::sort(gone.begin(), gone.end());
    for (auto& [rp, ji] : gone) {
      auto& j = s.runs[rp].jobs[ji];
      requeue_sampling(j, "latent host " + j.latent_host + " down");
    }
  }

  void on(const ev_drain& e) { apply_drain(s, e, now, fx); }
  void on(const ev_gpu_health& e) { apply_gpu_health(s, e, now, fx); }
  void on(const ev_gpu_power& e) {
    for (auto& r : e.readings)
      s.power.reading(r.gpu, r.unix_s / s.p.time_scale, r.power_w);
    s.power.forget(now);
  }

  /// Retention and re-offer (docs/dataplane.md). A latent is needed while a job that is
  /// sampled or decoding names it, or a waiting job takes it (graph::latents_wanted); a latent sampled for a job (its note says which) that
  /// waits for a latent again is adopted; one whose job succeeded (was decoded) or went
  /// on with another latent, or a received copy whose jobs all succeeded, is released. A
  /// latent of a failed job (resume may decode it), of a job still sampling or of a job
  /// this coordinator does not know is kept.
  void on(const ev_latent_holdings& e) {
    const auto& h = e.h;
    if (h.latents.empty())
      return;
    std::set<std::string> needed;
    for (auto& [t, rp, ji] : s.idx.sampled)
      needed.insert(s.runs[rp].jobs[ji].latent_sha256);
    for (auto& [d, jobs] : s.idx.decoding)
      for (auto& [rp, ji] : jobs)
        needed.insert(s.runs[rp].jobs[ji].latent_sha256);
    for (auto& [t, rp, ji] : s.idx.backoff)  // sampled, waiting to be ordered again
      if (s.runs[rp].jobs[ji].state == job_state::sampled)
        needed.insert(s.runs[rp].jobs[ji].latent_sha256);
    graph::latents_wanted(s, needed);  // handed over to a shot that continues from it
    std::vector<std::string> release;
    std::map<std::string, bool> final_names;  ///< digest -> every job naming it is final
    for (auto& l : h.latents) {
      if (l.checkpoint_step != 0) {
        auto* j = l.run_id.empty() ? nullptr : s.find_job(l.run_id, l.index);
        bool changed = false;
        if (release_held_checkpoint(s, j, l, h.host, changed, fx))
          release.push_back(l.sha256);
        if (changed)
          persist(*j);
        continue;
      }
      if (needed.count(l.sha256) != 0)
        continue;
      if (l.run_id.empty()) {
        // A received copy (no note): released once every job naming it succeeded. One no
        // job names is kept: it may be this host's own, not yet reported.
        if (final_names.empty())
          for (auto& r : s.runs)
            for (auto& j : r.jobs)
              if (!j.latent_sha256.empty()) {
                const bool fin = j.state == job_state::succeeded;
                auto [it, fresh] = final_names.emplace(j.latent_sha256, fin);
                if (!fresh)
                  it->second = it->second && fin;
              }
        auto it = final_names.find(l.sha256);
        if (it != final_names.end() && it->second)
          release.push_back(l.sha256);
        continue;
      }
      auto* j = s.find_job(l.run_id, l.index);
      if (j == nullptr) {
        // A forgotten run's latent (a failed job's: the decoded ones were released) stays
        // while the journal holds the run, so resuming it decodes without sampling again.
        // A run neither here nor journaled will never want it: released.
        bool journaled = false;
        for (auto& [at, id] : s.journaled)
          if (id == l.run_id) {
            journaled = true;
            break;
          }
        if (!journaled) {
          release.push_back(l.sha256);
          log(2, "latent " + l.sha256 + " on " + h.host + " names job " + l.run_id + "/"
                   + std::to_string(l.index) + ", which no run holds: released");
        }
        continue;
      }
      // A failed job's latent stays: `vidline resume` decodes it without sampling again.
      if (j->state == job_state::sampling || j->state == job_state::failed)
        continue;
      if (j->state == job_state::cancelled) {
        release.push_back(l.sha256);  // stopped by the user: nothing will decode it
        continue;
      }
      if (j->state == job_state::queued) {
        // Not a latent this job already gave up moving (that would go round for ever).
        if (!host_up(h.host) || j->handoff_failures > s.p.lost_factor * s.p.max_attempts)
          continue;
        j->latent_sha256 = l.sha256;
        j->latent_bytes = l.bytes;
        j->latent_host = h.host;
        j->sample_end = now;
        j->ran = stage_clock{};
        j->ran.sampler_end = now;  // made before: its sampling is not known, its wait is
        set_state(*j, job_state::sampled);
        j->error.clear();
        persist(*j);
        needed.insert(l.sha256);
        log(2, "job " + job_name(*j) + " adopted latent " + l.sha256 + " re-offered by " + h.host);
        continue;
      }
      release.push_back(l.sha256);  // finished, or went on with another latent
    }
    if (!release.empty())
      fx.push_back(fx_release{h.host, std::move(release)});
  }

  /// Jobs decoding on a decoder, in run and job order (a copy: callers change states).
  std::vector<job*> decoding_on(const std::string& decoder) {
    std::vector<job*> out;
    auto it = s.idx.decoding.find(decoder);
    if (it != s.idx.decoding.end())
      for (auto& [rp, ji] : it->second)
        out.push_back(&s.runs[rp].jobs[ji]);
    return out;
  }

  // -- dispatch ----------------------------------------------------------------------------

  void send_sample(pool_view& p, job& j) {
    j.order_sent_at = now;
    fx.push_back(
      fx_send_sample{p.host, msg::sample_order{p.name, j.attempt, j.spec, resume_point(s, j, p)}});
  }

  void send_decode(decoder_view& d, job& j) {
    // A decode on a pool's GPU unloads the pool's model.
    for (auto& name : d.shares_gpu_with)
      if (auto it = s.pools.find(name); it != s.pools.end())
        it->second.warm = false;
    j.order_sent_at = now;
    d.ordered[j.attempt] = now;
    d.sent[j.attempt] = now;
    fx.push_back(fx_send_decode{
      d.host, msg::decode_order{d.name, j.attempt, j.spec, j.latent_sha256, j.latent_bytes,
                                j.latent_host, j.pool, j.conditioning_s, j.sampling_s,
                                j.model_identity}});
  }

  bool host_up(const std::string& host) const { return s.host_up(host); }

  /// The free pools of a mode, in the mode's order.
  std::vector<uint32_t> free_in_mode(const std::string& mode) {
    if (!s.idx.mode_ids.count(mode))
      index_mode(s, mode);
    const auto& ids = s.idx.mode_ids.at(mode);
    const auto& pos = s.idx.mode_pos.at(mode);
    std::vector<uint32_t> out;
    if (s.idx.free_pools.size() * 8 < ids.size()) {
      for (uint32_t id : s.idx.free_pools)
        if (pos[id] >= 0)
          out.push_back(id);
      std::sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) { return pos[a] < pos[b]; });
    } else {
      for (uint32_t id : ids)
        if (s.idx.free_flag[id])
          out.push_back(id);
    }
    return out;
  }

  /// Every open run's queued jobs, by priority then submission (state_index::run_order):
  /// a run first in the queue takes the free pools it wants, the next one gets the rest.
  void dispatch_sampling() {
    if (s.idx.free_pools.empty())
      return;
    // Jobs queued per mode over all open runs: a policy that looks ahead sees the queue.
    std::map<std::string, std::size_t> mode_queued;
    for (std::size_t rp = 0; rp < s.runs.size(); ++rp)
      if (!s.runs[rp].done)
        mode_queued[s.runs[rp].mode] += s.idx.runs[rp].queued.size();
    for (std::size_t rp : s.idx.run_order) {
      auto& r = s.runs[rp];
      if (r.done || s.idx.runs[rp].queued.empty() || s.idx.free_pools.empty())
        continue;
      auto free = free_in_mode(r.mode);
      const auto& policy = s.policy_of(r.mode);
      while (!free.empty()) {
        auto a = policy.next(dispatch_view{s, r, s.idx.runs[rp], free, now,
                                           std::max(mode_queued[r.mode],
                                                    s.idx.runs[rp].queued.size())});
        if (!a)
          break;
        if (a->job >= r.jobs.size() || r.jobs[a->job].state != job_state::queued
            || a->pool >= s.idx.pool_names.size() || !s.idx.free_flag[a->pool]
            || std::find(free.begin(), free.end(), a->pool) == free.end()
            || !pool_may_take(*s.idx.pool_views[a->pool], r.jobs[a->job])) {
          log(4, std::string("dispatch policy ") + policy.name() + " chose job "
                   + std::to_string(a->job) + " for pool id " + std::to_string(a->pool)
                   + ", which it may not have; nothing more dispatched for run " + r.id);
          break;
        }
        by_model(r, rp, *a, free, policy);
        order_sample(r, rp, r.jobs[a->job], *s.idx.pool_views[a->pool]);
        if (mode_queued[r.mode] > 0)
          --mode_queued[r.mode];
        free.erase(std::remove_if(free.begin(), free.end(),
                                  [&](uint32_t id) { return !s.idx.free_flag[id]; }),
                   free.end());
      }
    }
  }

  /// Model affinity: a pool holds one model, and loading another costs a cold stage. When
  /// the policy sends job j to pool p and p holds another model, a free pool of p's kind
  /// that holds j's model takes j instead; otherwise p takes the lowest queued job of the
  /// run of j's size whose model it holds, so a pool keeps to one model while its jobs last,
  /// unless j has been passed over this way for params::model_wait_s: then j goes, and p
  /// switches.
  void by_model(run& r, std::size_t rp, assignment& a, const std::vector<uint32_t>& free,
                const dispatch_policy& policy) {
    job& j = r.jobs[a.job];
    const pool_view& p = *s.idx.pool_views[a.pool];
    if (!p.warm || p.model == j.spec.model)
      return;  // nothing loaded to keep, or already the job's model
    for (uint32_t id : free) {
      const pool_view& q = *s.idx.pool_views[id];
      if (id != a.pool && q.kind == p.kind && warm_for(q, j.spec) && s.idx.free_flag[id]
          && !s.idx.unavailable_flag[id] && pool_may_take(q, j)) {
        a.pool = id;
        return;
      }
    }
    double wait = s.p.model_wait_s;
    if (wait < 0)
      wait = policy.expected_sampling(p.kind, j.spec, true).value_or(default_model_wait_s);
    if (j.passed_over_at >= 0 && now - j.passed_over_at >= wait)
      return;  // it has waited its turn: p switches to its model
    auto m = s.idx.runs[rp].queued_by_model.find(p.model);
    if (m == s.idx.runs[rp].queued_by_model.end() || wait <= 0)
      return;
    std::size_t looked = 0;
    for (uint32_t i : m->second) {
      if (++looked > max_model_scan)
        break;
      const job& k = r.jobs[i];
      if (k.retry_at < 0 && k.spec.width == j.spec.width && k.spec.height == j.spec.height
          && k.spec.seconds == j.spec.seconds && pool_may_take(p, k)) {
        if (j.passed_over_at < 0)
          j.passed_over_at = now;
        a.job = i;
        return;
      }
    }
  }

  void order_sample(run& r, std::size_t rp, job& j, pool_view& p) {
    set_state(j, job_state::sampling);
    j.passed_over_at = -1;
    j.attempt = s.next_attempt++;
    ++j.sample_attempts;
    j.pool = p.name;
    if (j.sample_start < 0)
      j.sample_start = now;
    j.attempt_at = now;
    j.resumed_step = resume_point(s, j, p).step;
    p.assigned = std::make_pair(r.id, j.spec.index);
    p.ordered_at = now;
    j.lease_until = mono + s.p.lease_s;  // the pool may hold it from now
    // The pools sharing its GPUs lose their loaded model.
    for (auto& q : p.conflicts)
      if (auto it = s.pools.find(q); it != s.pools.end())
        it->second.warm = false;
    s.idx.runs[rp].first_order_on_host.emplace(p.host, now);
    touch(p.name);
    persist(j);  // durable before the order leaves
    send_sample(p, j);
  }

  /// Decoders take latents oldest-sampled first, only against a credit.
  void dispatch_decoding() {
    for (auto it = s.idx.sampled.begin(); it != s.idx.sampled.end();) {
      auto [t, rp, ji] = *it;
      ++it;  // the job leaves `sampled` below
      auto& j = s.runs[rp].jobs[ji];
      if (!host_up(j.latent_host))
        continue;
      auto* d = pick_decoder(j);
      if (d == nullptr)
        break;
      j.decoder = d->name;  // the index files a decoding job by its decoder
      set_state(j, job_state::decoding);
      j.attempt = s.next_attempt++;
      j.lease_until = mono + s.p.lease_s;  // the decoder may hold it from now
      ++j.decode_attempts;
      if (j.decode_start < 0)
        j.decode_start = now;
      j.attempt_at = now;
      j.ran.decode_ordered = now;  // its wait for a decoder ends here
      persist(j);
      send_decode(*d, j);
    }
  }

  /// The alive decoder of the job's mode with the most credits (the first of them).
  decoder_view* pick_decoder(const job& j) {
    const run* r = s.find_run(j.spec.run_id);
    if (r == nullptr)
      return nullptr;
    auto m = s.idx.mode_decoder_views.find(r->mode);
    if (m == s.idx.mode_decoder_views.end())
      return nullptr;
    auto* d = s.policy_of(r->mode).pick_decoder(s, *r, j, m->second, now);
    if (d != nullptr && (!d->alive || d->drained || d->credits() == 0 || decoder_blocked(s, *d)
                         || std::find(m->second.begin(), m->second.end(), d) == m->second.end())) {
      log(4, "dispatch policy chose decoder " + d->name + ", which cannot take a latent now");
      return nullptr;
    }
    return d;
  }

  void close_finished_runs() {
    for (std::size_t rp = 0; rp < s.runs.size(); ++rp) {
      auto& r = s.runs[rp];
      if (r.done || s.idx.runs[rp].unfinished != 0)
        continue;
      r.done = true;
      r.finished_at = now;
      fx.push_back(fx_persist_run{r.id});
      fx.push_back(fx_run_done{r.id});
      auto sum = summarize(r);
      log(2, "run " + r.id + " finished: " + std::to_string(sum.succeeded) + " succeeded, "
               + std::to_string(sum.failed) + " failed");
    }
  }
};

} // namespace

std::vector<effect> step(state& s, const event& e, double now, double mono) {
  if (!s.idx.built || s.idx.runs.size() != s.runs.size()
      || s.idx.pool_names.size() != s.pools.size())
    reindex(s);
  else if (s.idx.owner != &s)
    relink(s);
  end_backoffs(s, now);
  stepper st{s, now, mono, {}};
  std::visit([&](const auto& ev) { st.on(ev); }, e);
  // Pools sharing a GPU with a decoder are free or not by the decoder's work too.
  for (uint32_t id : s.idx.decoder_shared)
    set_flags(s, id);
  st.dispatch_sampling();
  preempt_for_queue(s, now, st.fx);
  st.dispatch_decoding();
  for (uint32_t id : s.idx.decoder_shared)
    set_flags(s, id);
  st.close_finished_runs();
  return std::move(st.fx);
}

const run* run_of_request(const state& s, const std::string& request_id) {
  if (request_id.empty())
    return nullptr;
  for (auto& r : s.runs)
    if (r.request_id == request_id)
      return &r;
  return nullptr;
}

std::optional<double> next_retry(const state& s) {
  if (s.idx.built && s.idx.owner == &s) {
    if (s.idx.backoff.empty())
      return std::nullopt;
    return std::get<0>(*s.idx.backoff.begin());
  }
  {
    std::optional<double> at;
    for (auto& r : s.runs)
      for (auto& j : r.jobs)
        if (backing_off(j) && (!at || j.retry_at < *at))
          at = j.retry_at;
    return at;
  }
}

summary summarize(const run& r) {
  summary out;
  double first = -1;
  double last = -1;
  for (auto& j : r.jobs) {
    if (j.state == job_state::succeeded) {
      ++out.succeeded;
      // When the video was made, as its decoder stamped it (else when the result came).
      double t = (j.ran.decode_end >= 0 ? j.ran.decode_end : j.decode_end) - r.submitted_at;
      first = first < 0 ? t : std::min(first, t);
      last = std::max(last, t);
    } else if (j.state == job_state::failed) {
      ++out.failed;
    } else if (j.state == job_state::cancelled) {
      ++out.cancelled;
    } else if (j.state == job_state::reused) {
      ++out.reused;
    }
    out.done_twice += j.duplicates;
    out.fenced += j.fenced;
    out.products_retracted += j.retracted;
    out.gpu_s_paid_twice += j.gpu_s_redone;
    for (double e : {j.sampling_energy_j, j.decode_energy_j})
      if (e >= 0)
        out.energy_j = std::max(out.energy_j, 0.0) + e;
  }
  if (out.energy_j > 0 && out.succeeded > 0) {
    out.wh_per_clip = out.energy_j / 3600.0 / out.succeeded;
    out.clips_per_kwh = 1000.0 / out.wh_per_clip;
  }
  if (first >= 0) {
    out.first_finish_s = first;
    out.makespan_s = last;
    out.clips_per_hour = last > 0 ? out.succeeded * 3600.0 / last : 0;
  }
  return out;
}

} // namespace vidline::sched
