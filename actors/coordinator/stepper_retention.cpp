// The stepper (stepper.hpp): finished runs forgotten, then dropped from the journal.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/verdicts.hpp"

namespace vidline::actors::coordinator {

void stepper::retain() {
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

void stepper::forget(const std::vector<std::string>& ids) {
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
    coordinator::remember_outputs(s, r);
    if (s.p.journal_keep_finished_s >= 0)
      s.journaled.emplace(r.finished_at >= 0 ? r.finished_at : r.submitted_at, r.id);
    ++s.runs_forgotten;
    log(1, "run " + r.id + " forgotten (finished; the journal holds it)");
  }
  s.runs = std::move(kept);
  // Positions moved: the index is rebuilt (at most once a tick, over the runs kept).
  reindex(s);
}

} // namespace vidline::actors::coordinator
