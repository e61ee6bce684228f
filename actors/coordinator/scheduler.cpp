#include "actors/coordinator/scheduler.hpp"

#include <algorithm>

namespace vidline::sched {

const char* to_string(job_state s) {
  switch (s) {
    case job_state::queued: return "queued";
    case job_state::sampling: return "sampling";
    case job_state::sampled: return "sampled";
    case job_state::decoding: return "decoding";
    case job_state::succeeded: return "succeeded";
    case job_state::failed: return "failed";
  }
  return "unknown";
}

std::optional<job_state> job_state_from(const std::string& s) {
  for (auto st : {job_state::queued, job_state::sampling, job_state::sampled,
                  job_state::decoding, job_state::succeeded, job_state::failed})
    if (s == to_string(st))
      return st;
  return std::nullopt;
}

uint32_t decoder_view::credits() const {
  std::set<uint64_t> busy = holding;
  for (auto& [attempt, sent_at] : ordered)
    busy.insert(attempt);
  return busy.size() >= capacity ? 0 : capacity - static_cast<uint32_t>(busy.size());
}

run* state::find_run(const std::string& id) {
  for (auto& r : runs)
    if (r.id == id)
      return &r;
  return nullptr;
}

const run* state::find_run(const std::string& id) const {
  for (auto& r : runs)
    if (r.id == id)
      return &r;
  return nullptr;
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
  if (!p.alive || !p.accepting || p.assigned)
    return false;
  // A pool still busy with an attempt we no longer track (fenced) is not free either.
  if (p.reported_busy != 0)
    return false;
  for (auto& other : p.conflicts) {
    auto o = pools.find(other);
    if (o != pools.end() && (o->second.assigned || o->second.reported_busy != 0))
      return false;
  }
  return true;
}

bool pool_may_take(const pool_view& p, const job& j) {
  return j.capacity_failed.count(p.kind) == 0;
}

std::optional<std::string> pick_in_turn(const state& s, const run& r, const job& j,
                                        double) {
  auto mode = s.modes.find(r.mode);
  if (mode == s.modes.end())
    return std::nullopt;
  for (auto& name : mode->second) {
    auto it = s.pools.find(name);
    if (it != s.pools.end() && pool_may_take(it->second, j) && s.pool_free(name))
      return name;
  }
  return std::nullopt;
}

namespace {

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
  std::vector<effect> fx;

  void log(int level, std::string text) { fx.push_back(fx_log{level, std::move(text)}); }

  void persist(const job& j) { fx.push_back(fx_persist_job{j.spec.run_id, j.spec.index}); }

  static std::string job_name(const job& j) {
    return j.spec.run_id + "/" + std::to_string(j.spec.index);
  }

  // -- job transitions ---------------------------------------------------------------------

  void release_pool_of(const job& j) {
    auto it = s.pools.find(j.pool);
    if (it != s.pools.end() && it->second.assigned
        && it->second.assigned->first == j.spec.run_id
        && it->second.assigned->second == j.spec.index)
      it->second.assigned.reset();
  }

  void release_decoder_of(const job& j) {
    auto it = s.decoders.find(j.decoder);
    if (it != s.decoders.end()) {
      it->second.ordered.erase(j.attempt);
      it->second.holding.erase(j.attempt);
    }
  }

  void finish(job& j, job_state final_state, std::string error) {
    j.state = final_state;
    j.error = std::move(error);
    j.order_sent_at = -1;
    persist(j);
    fx.push_back(fx_job_final{j.spec.run_id, j.spec.index});
    if (final_state == job_state::failed)
      log(3, "job " + job_name(j) + " failed: " + j.error);
    else
      log(2, "job " + job_name(j) + " succeeded: " + j.output);
  }

  /// An attempt lost to a crash or a host going down is given back, up to a bound that
  /// stops a job which itself crashes its pool every time.
  void refund_lost(job& j, uint32_t& attempts) {
    ++j.lost_attempts;
    if (attempts > 0 && j.lost_attempts <= s.p.lost_factor * s.p.max_attempts)
      --attempts;
  }

  /// Back to the queue for another sampling attempt, or failed when attempts are spent.
  void requeue_sampling(job& j, const std::string& why) {
    j.state = job_state::queued;
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
    persist(j);
    log(2, "job " + job_name(j) + " queued again: " + why);
  }

  /// Back to waiting for a decoder, or failed when attempts are spent.
  void requeue_decoding(job& j, const std::string& why) {
    j.state = job_state::sampled;
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
    s.runs.push_back(e.r);
    auto& r = s.runs.back();
    r.submitted_at = now;
    fx.push_back(fx_persist_run{r.id});
    for (auto& j : r.jobs)
      persist(j);
    log(2, "run " + r.id + " submitted: " + std::to_string(r.jobs.size()) + " jobs, mode "
             + r.mode);
    refuse_impossible(r);
  }

  /// A job no pool of its mode can hold fails at once instead of waiting forever.
  void refuse_impossible(run& r) {
    auto mode = s.modes.find(r.mode);
    for (auto& j : r.jobs) {
      if (j.state != job_state::queued)
        continue;
      bool possible = false;
      if (mode != s.modes.end())
        for (auto& name : mode->second) {
          auto it = s.pools.find(name);
          if (it != s.pools.end() && pool_may_take(it->second, j))
            possible = true;
        }
      if (!possible)
        finish(j, job_state::failed,
               j.error.empty() ? "no pool of mode " + r.mode + " can hold this job"
                               : "capacity: no pool of mode " + r.mode
                                   + " can hold this job; last: " + j.error);
    }
  }

  void on(const ev_peer& e) {
    s.hosts_up[e.host] = e.up;
    if (e.up) {
      s.host_down_since.erase(e.host);
      return;
    }
    s.host_down_since.emplace(e.host, now);
    log(3, "host " + e.host + " is down");
    for (auto& [name, p] : s.pools)
      if (p.host == e.host)
        pool_lost(p, "host " + e.host + " went down");
    for (auto& [name, d] : s.decoders)
      if (d.host == e.host)
        decoder_lost(d, "host " + e.host + " went down");
  }

  void pool_lost(pool_view& p, const std::string& why) {
    p.alive = false;
    p.reported_busy = 0;
    if (!p.assigned)
      return;
    auto* j = s.find_job(p.assigned->first, p.assigned->second);
    p.assigned.reset();
    if (j != nullptr && j->state == job_state::sampling && j->pool == p.name) {
      refund_lost(*j, j->sample_attempts);
      requeue_sampling(*j, "pool " + p.name + ": " + why);
    }
  }

  void decoder_lost(decoder_view& d, const std::string& why) {
    d.alive = false;
    std::set<uint64_t> lost = d.holding;
    for (auto& [a, t] : d.ordered)
      lost.insert(a);
    d.holding.clear();
    d.ordered.clear();
    for (auto& r : s.runs)
      for (auto& j : r.jobs)
        if (j.state == job_state::decoding && j.decoder == d.name && lost.count(j.attempt)) {
          refund_lost(j, j.decode_attempts);
          requeue_decoding(j, "decoder " + d.name + ": " + why);
        }
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
    p.alive = host_up(p.host);
    p.accepting = e.s.accepting;
    p.reported_busy = e.s.busy_attempt;
    p.last_status = now;
    for (auto& r : e.s.unacked)
      on_sample_result(r);
    // An order the pool has not shown (neither running nor finished) was lost on the way.
    if (p.assigned) {
      auto* j = s.find_job(p.assigned->first, p.assigned->second);
      if (j != nullptr && j->state == job_state::sampling && e.s.busy_attempt != j->attempt
          && now - j->order_sent_at >= s.p.order_resend_s)
        send_sample(p, *j);
    }
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
    for (auto& r : s.runs)
      for (auto& j : r.jobs)
        if (j.state == job_state::decoding && j.decoder == d.name
            && d.holding.count(j.attempt) == 0 && now - j.order_sent_at >= s.p.order_resend_s)
          send_decode(d, j);
  }

  void on(const ev_sample_result& e) { on_sample_result(e.r); }
  void on(const ev_decode_result& e) { on_decode_result(e.r); }

  void ack(const std::string& host, const std::string& target, uint64_t attempt) {
    fx.push_back(fx_ack{host, target, attempt});
  }

  void on_sample_result(const msg::sample_result& r) {
    auto* j = s.find_job(r.run_id, r.index);
    if (j == nullptr || j->attempt != r.attempt || j->state != job_state::sampling) {
      // Late or duplicate: fence it. An ok latent for a job still waiting is adopted:
      // latents are content-addressed and deterministic, paying twice helps no one.
      if (j != nullptr && j->state == job_state::queued && r.outcome == msg::outcome::ok) {
        adopt_latent(*j, r);
        log(2, "job " + job_name(*j) + " adopted a late latent from " + r.pool);
      }
      ack(r.host, "pool:" + r.pool, r.attempt);
      return;
    }
    release_pool_of(*j);
    j->order_sent_at = -1;
    if (r.outcome == msg::outcome::ok) {
      adopt_latent(*j, r);
    } else if (r.outcome == msg::outcome::capacity) {
      auto it = s.pools.find(r.pool);
      if (it != s.pools.end())
        j->capacity_failed.insert(it->second.kind);
      j->state = job_state::queued;
      j->error = "capacity on pool " + r.pool + ": " + r.error;
      persist(*j);
      log(3, "job " + job_name(*j) + " does not fit pool " + r.pool + ": " + r.error);
      if (auto* run = s.find_run(r.run_id))
        refuse_impossible(*run);
    } else if (r.outcome == msg::outcome::transient) {
      requeue_sampling(*j, "pool " + r.pool + ": " + r.error);
    } else {
      finish(*j, job_state::failed, "pool " + r.pool + ": " + r.error);
    }
    ack(r.host, "pool:" + r.pool, r.attempt);
  }

  void adopt_latent(job& j, const msg::sample_result& r) {
    j.state = job_state::sampled;
    j.latent_sha256 = r.latent_sha256;
    j.latent_bytes = r.latent_bytes;
    j.latent_host = r.host;
    j.pool = r.pool;
    j.cold = r.cold;
    j.conditioning_s = r.conditioning_s;
    j.sampling_s = r.sampling_s;
    j.sample_end = now;
    j.error.clear();
    persist(j);
  }

  void on_decode_result(const msg::decode_result& r) {
    auto* j = s.find_job(r.run_id, r.index);
    if (j == nullptr || j->attempt != r.attempt || j->state != job_state::decoding) {
      ack(r.host, "decoder:" + r.decoder, r.attempt);
      return;
    }
    release_decoder_of(*j);
    j->order_sent_at = -1;
    j->handoff_s = r.handoff_s;
    j->decode_s = r.decode_s;
    if (r.outcome == msg::outcome::ok) {
      j->output = r.output;
      j->output_sha256 = r.output_sha256;
      j->decode_end = now;
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
      }
    } else if (r.outcome == msg::outcome::transient) {
      requeue_decoding(*j, "decoder " + r.decoder + ": " + r.error);
    } else {
      finish(*j, job_state::failed, "decoder " + r.decoder + ": " + r.error);
    }
    ack(r.host, "decoder:" + r.decoder, r.attempt);
  }

  void on(const ev_tick&) {
    // Latents on a host that stays down are sampled again elsewhere.
    for (auto& r : s.runs)
      for (auto& j : r.jobs)
        if (j.state == job_state::sampled) {
          auto down = s.host_down_since.find(j.latent_host);
          if (down != s.host_down_since.end() && now - down->second >= s.p.latent_wait_s)
            requeue_sampling(j, "latent host " + j.latent_host + " down");
        }
  }

  // -- dispatch ----------------------------------------------------------------------------

  void send_sample(pool_view& p, job& j) {
    j.order_sent_at = now;
    fx.push_back(fx_send_sample{p.host, msg::sample_order{p.name, j.attempt, j.spec}});
  }

  void send_decode(decoder_view& d, job& j) {
    j.order_sent_at = now;
    d.ordered[j.attempt] = now;
    fx.push_back(fx_send_decode{
      d.host, msg::decode_order{d.name, j.attempt, j.spec, j.latent_sha256, j.latent_bytes,
                                j.latent_host}});
  }

  bool host_up(const std::string& host) const {
    auto it = s.hosts_up.find(host);
    return it == s.hosts_up.end() || it->second;
  }

  void dispatch_sampling() {
    for (auto& r : s.runs) {
      if (r.done)
        continue;
      for (auto& j : r.jobs) {
        if (j.state != job_state::queued)
          continue;
        auto pick = s.policy ? s.policy(s, r, j, now) : pick_in_turn(s, r, j, now);
        if (!pick)
          continue;
        auto& p = s.pools.at(*pick);
        j.state = job_state::sampling;
        j.attempt = s.next_attempt++;
        ++j.sample_attempts;
        j.pool = p.name;
        if (j.sample_start < 0)
          j.sample_start = now;
        p.assigned = std::make_pair(r.id, j.spec.index);
        persist(j);  // durable before the order leaves
        send_sample(p, j);
      }
    }
  }

  /// Decoders take latents oldest-sampled first, only against a credit.
  void dispatch_decoding() {
    std::vector<job*> ready;
    for (auto& r : s.runs)
      for (auto& j : r.jobs)
        if (j.state == job_state::sampled && host_up(j.latent_host))
          ready.push_back(&j);
    std::stable_sort(ready.begin(), ready.end(),
                     [](const job* a, const job* b) { return a->sample_end < b->sample_end; });
    for (auto* j : ready) {
      auto* d = pick_decoder(*j);
      if (d == nullptr)
        break;
      j->state = job_state::decoding;
      j->attempt = s.next_attempt++;
      ++j->decode_attempts;
      j->decoder = d->name;
      if (j->decode_start < 0)
        j->decode_start = now;
      persist(*j);
      send_decode(*d, *j);
    }
  }

  decoder_view* pick_decoder(const job& j) {
    const run* r = s.find_run(j.spec.run_id);
    if (r == nullptr)
      return nullptr;
    auto m = s.mode_decoders.find(r->mode);
    if (m == s.mode_decoders.end())
      return nullptr;
    decoder_view* best = nullptr;
    for (auto& name : m->second) {
      auto it = s.decoders.find(name);
      if (it == s.decoders.end() || !it->second.alive || it->second.credits() == 0)
        continue;
      if (best == nullptr || it->second.credits() > best->credits())
        best = &it->second;
    }
    return best;
  }

  void close_finished_runs() {
    for (auto& r : s.runs) {
      if (r.done)
        continue;
      bool all_final = std::all_of(r.jobs.begin(), r.jobs.end(), [](const job& j) {
        return j.state == job_state::succeeded || j.state == job_state::failed;
      });
      if (!all_final)
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

std::vector<effect> step(state& s, const event& e, double now) {
  stepper st{s, now, {}};
  std::visit([&](const auto& ev) { st.on(ev); }, e);
  st.dispatch_sampling();
  st.dispatch_decoding();
  st.close_finished_runs();
  return std::move(st.fx);
}

summary summarize(const run& r) {
  summary out;
  double first = -1;
  double last = -1;
  for (auto& j : r.jobs) {
    if (j.state == job_state::succeeded) {
      ++out.succeeded;
      double t = j.decode_end - r.submitted_at;
      first = first < 0 ? t : std::min(first, t);
      last = std::max(last, t);
    } else if (j.state == job_state::failed) {
      ++out.failed;
    }
  }
  if (first >= 0) {
    out.first_finish_s = first;
    out.makespan_s = last;
    out.clips_per_hour = last > 0 ? out.succeeded * 3600.0 / last : 0;
  }
  return out;
}

} // namespace vidline::sched
