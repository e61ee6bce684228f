// The stepper (stepper.hpp): sampling and decode results, late ones included.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/graph.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

void stepper::on(const ev_sample_result& e) { on_sample_result(e.r); }

void stepper::on(const ev_decode_result& e) { on_decode_result(e.r); }

void stepper::ack(const std::string& host, const std::string& target, uint64_t attempt,
                  bool discard) {
  fx.push_back(fx_ack{host, target, attempt, discard});
}

void stepper::late_sample_result(job* j, const msg::sample_result& r) {
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

void stepper::late_decode_result(job* j, const msg::decode_result& r) {
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
  coordinator::on_output(s, *j, fx, now);  // its key now names the decoder that holds it
  ack(r.host, target, r.attempt);
}

void stepper::on_sample_result(const msg::sample_result& r) {
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

void stepper::observe_speed(const job& j, const msg::sample_result& r) {
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

void stepper::adopt_latent(job& j, const msg::sample_result& r) {
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

void stepper::on_decode_result(const msg::decode_result& r) {
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

} // namespace vidline::actors::coordinator
