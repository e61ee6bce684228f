#include "actors/coordinator/scheduler.hpp"
#include "actors/coordinator/index.hpp"
#include "actors/coordinator/preempt.hpp"
#include "actors/coordinator/stepper.hpp"

#include <algorithm>

namespace vidline::actors::coordinator {

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

} // namespace vidline::actors::coordinator
