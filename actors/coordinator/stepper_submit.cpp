// The stepper (stepper.hpp): runs submitted, jobs added to a run.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/index.hpp"

namespace vidline::actors::coordinator {

using namespace detail;  // the index's mutators (index.hpp)

// -- events ------------------------------------------------------------------------------

void stepper::on(const ev_submit& e) {
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
  const auto finals = coordinator::admit(s, r);
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

void stepper::announce_finals(const run& r, const std::vector<uint32_t>& finals) {
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
  coordinator::ask_inputs(s, fx, now);
}

void stepper::on(const ev_input_made& e) {
  auto [j, why] = coordinator::on_input_made(s, e, fx, now);
  if (j != nullptr)
    finish(*j, job_state::failed, why);
}

void stepper::refuse_impossible(run& r) {
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

bool stepper::possible(const run& r, const job& j) const {
  auto mode = s.modes.find(r.mode);
  if (mode != s.modes.end())
    for (auto& name : mode->second) {
      auto it = s.pools.find(name);
      if (it != s.pools.end() && pool_may_take(it->second, j))
        return true;
    }
  return false;
}

void stepper::refuse(run& r, job& j) {
  finish(j, job_state::failed,
         j.error.empty() ? "no pool of mode " + r.mode + " can hold this job"
                         : "capacity: no pool of mode " + r.mode
                             + " can hold this job; last: " + j.error);
}

void stepper::on(const ev_add_jobs& e) {
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
  const auto finals = coordinator::admit(s, *r, first);
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

} // namespace vidline::actors::coordinator
