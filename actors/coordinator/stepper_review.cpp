// The stepper (stepper.hpp): verdicts and other takes.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/review.hpp"
#include "actors/coordinator/verdicts.hpp"

namespace vidline::actors::coordinator {

void stepper::on(const ev_review& e) {
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

} // namespace vidline::actors::coordinator
