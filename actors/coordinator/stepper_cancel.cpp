// The stepper (stepper.hpp): runs and jobs cancelled.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/checkpoints.hpp"

namespace vidline::actors::coordinator {

void stepper::cancel_job(job& j) {
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

void stepper::send_cancel(const std::string& host, const std::string& target, uint64_t epoch,
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

void stepper::on(const ev_cancel& e) {
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

} // namespace vidline::actors::coordinator
