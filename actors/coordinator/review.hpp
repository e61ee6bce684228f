#pragma once
/// The review, inside the scheduler: what a reviewer's verdict on a take asks of its run
/// (ev_review, scheduler.hpp). Pure: the stepper records the verdict and adds the take the
/// plan holds through the path of jobs added (ev_add_jobs).

#include <cstdint>
#include <optional>
#include <string>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// A verdict checked against its run: the verdict to record ("accepted" | "rejected") and
/// the job of another take when the reject asks for one that was not added before, or why
/// not (`code`: "no_such_run", "not_reviewable", "invalid"; as fx_review_answer).
struct review_plan {
  std::string error;
  std::string code;
  std::string verdict;
  std::optional<job> take;
};
review_plan plan_review(const run& r, const ev_review& e);

/// The output stem of take `take` (0-based) of shot `shot`: SHOT-take-N (N = take + 1).
std::string take_stem(const std::string& shot, uint32_t take);

} // namespace vidline::actors::coordinator
