#include "actors/coordinator/checkpoints.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {
namespace {

void release(const msg::checkpoint_ref& c, std::vector<effect>& fx) {
  if (!c.host.empty() && !c.sha256.empty())
    fx.push_back(fx_release{c.host, {c.sha256}});
}

uint32_t newest_step(const job& j) {
  return j.checkpoints.empty() ? 0 : j.checkpoints.back().ref.step;
}

bool may_resume(const job& j) {
  return j.state == job_state::queued || j.state == job_state::sampling
         || j.state == job_state::waiting || j.state == job_state::failed;
}

} // namespace

bool note_checkpoint(job& j, const msg::checkpoint_ref& c, const std::string& kind,
                     std::vector<effect>& fx) {
  if (c.step == 0 || c.sha256.empty() || c.attempt < j.checkpoint_floor)
    return false;
  for (auto& k : j.checkpoints)
    if (k.ref.sha256 == c.sha256)
      return false;
  // Steps go forward through resumes; one of the same step or earlier adds nothing.
  if (c.step <= newest_step(j))
    return false;
  j.checkpoints.push_back(kept_checkpoint{c, kind});
  while (j.checkpoints.size() > checkpoints_kept) {
    release(j.checkpoints.front().ref, fx);
    j.checkpoints.erase(j.checkpoints.begin());
  }
  return true;
}

msg::checkpoint_ref resume_point(const state& s, const job& j, const pool_view& p) {
  for (auto it = j.checkpoints.rbegin(); it != j.checkpoints.rend(); ++it) {
    if (it->kind != p.kind || it->ref.attempt < j.checkpoint_floor)
      continue;
    if (it->ref.host == p.host || s.host_up(it->ref.host))
      return it->ref;
  }
  return {};
}

const kept_checkpoint* checkpoint_on_down_host(const state& s, const job& j) {
  if (j.checkpoints.empty() || s.host_up(j.checkpoints.back().ref.host))
    return nullptr;
  return &j.checkpoints.back();
}

void drop_checkpoint(job& j, const std::string& sha256, std::vector<effect>& fx) {
  for (auto it = j.checkpoints.begin(); it != j.checkpoints.end(); ++it)
    if (it->ref.sha256 == sha256) {
      release(it->ref, fx);
      j.checkpoints.erase(it);
      return;
    }
}

void release_checkpoints(job& j, std::vector<effect>& fx) {
  for (auto& k : j.checkpoints)
    release(k.ref, fx);
  j.checkpoints.clear();
}

void restart_from_zero(job& j, uint64_t next_attempt, std::vector<effect>& fx) {
  release_checkpoints(j, fx);
  j.checkpoint_floor = next_attempt;
}

double kept_until(const state& s, const job& j) {
  double at = -1;
  for (auto& k : j.checkpoints)
    if (k.ref.attempt == j.attempt && k.ref.made_unix_s > 0)
      at = std::max(at, k.ref.made_unix_s / s.p.time_scale);
  return at;
}

bool release_held_checkpoint(state& s, job* j, const msg::latent_held& l,
                             const std::string& host, bool& changed, std::vector<effect>& fx) {
  changed = false;
  if (j == nullptr) {
    // A forgotten run's job is final: nothing resumes. Kept while the journal holds the run
    // (a resume of its failed job may go on from it), as its latents are.
    for (auto& [at, id] : s.journaled)
      if (id == l.run_id)
        return false;
    return true;
  }
  if (!may_resume(*j) || l.attempt < j->checkpoint_floor)
    return true;  // its latent is made (or it ended): no attempt will resume from it
  for (auto& k : j->checkpoints)
    if (k.ref.sha256 == l.sha256)
      return false;
  if (l.checkpoint_step <= newest_step(*j))
    return true;  // older than those kept
  // Newer than the kept ones: saved after the pool's last report. The job's last attempt's
  // is adopted (its pool's kind is known); another attempt's is kept until the job's latent
  // is made.
  if (l.attempt == j->attempt && j->state != job_state::sampling) {
    auto p = s.pools.find(j->pool);
    if (p != s.pools.end()) {
      msg::checkpoint_ref c;
      c.step = l.checkpoint_step;
      c.sha256 = l.sha256;
      c.bytes = l.bytes;
      c.host = host;
      c.attempt = l.attempt;
      changed = note_checkpoint(*j, c, p->second.kind, fx);
    }
  }
  return false;
}

} // namespace vidline::actors::coordinator
