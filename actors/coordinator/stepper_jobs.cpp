// The stepper (stepper.hpp): a job's moves between states.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/index.hpp"

#include <algorithm>
#include <cmath>

namespace vidline::actors::coordinator {

using namespace detail;  // the index's mutators (index.hpp)

// -- job transitions ---------------------------------------------------------------------

void stepper::release_pool_of(const job& j) {
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

void stepper::release_decoder_of(const job& j) {
  auto it = s.decoders.find(j.decoder);
  if (it != s.decoders.end()) {
    it->second.ordered.erase(j.attempt);
    it->second.holding.erase(j.attempt);
    it->second.sent.erase(j.attempt);
  }
}

void stepper::set_state(job& j, job_state to) { move_job(s, j, to); }

void stepper::touch(const std::string& pool) {
  auto id = s.idx.pool_ids.find(pool);
  if (id != s.idx.pool_ids.end())
    refresh_pool(s, id->second);
}

void stepper::finish(job& j, job_state final_state, std::string error) {
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
    coordinator::on_output(s, j, fx, now);
  else if (final_state == job_state::failed && !cascading)
    end_dependents(j, job_state::failed);
}

void stepper::end_dependents(const job& j, job_state how) {
  auto deps = coordinator::dependents(s, j);
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

void stepper::refund_lost(job& j, uint32_t& attempts) {
  ++j.lost_attempts;
  if (attempts > 0 && j.lost_attempts <= s.p.lost_factor * s.p.max_attempts)
    --attempts;
}

void stepper::hold_back(job& j) {
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

void stepper::requeue_sampling(job& j, const std::string& why) {
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

void stepper::wait_for_checkpoint_host(job& j) {
  auto* k = checkpoint_on_down_host(s, j);
  if (k == nullptr || j.state != job_state::queued)
    return;
  auto down = s.host_down_since.find(k->ref.host);
  const double since = down == s.host_down_since.end() ? now : down->second;
  if (since + s.p.latent_wait_s > now)
    set_retry_at(s, j, std::max(j.retry_at, since + s.p.latent_wait_s));
}

void stepper::requeue_decoding(job& j, const std::string& why) {
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

} // namespace vidline::actors::coordinator
