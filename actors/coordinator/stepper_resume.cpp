// The stepper (stepper.hpp): failed jobs resumed, a forgotten run recalled from the journal.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/index.hpp"
#include "config/shot_identity.hpp"

namespace vidline::actors::coordinator {

using namespace detail;  // the index's mutators (index.hpp)

void stepper::on(const ev_resume& e) {
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
  coordinator::refresh_due(s, s.idx.run_pos.at(r->id));
  coordinator::ask_inputs(s, fx, now);
  refuse_impossible(*r);
}

run* stepper::recall(const run& from_journal, bool need_failed) {
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

} // namespace vidline::actors::coordinator
