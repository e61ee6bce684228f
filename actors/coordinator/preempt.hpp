#pragma once
/// Preemption, inside the scheduler (docs/reliability.md, "Preemption"). With the knob
/// preempt_priority_gap set (params::preempt_priority_gap > 0), a queued job that no free
/// pool takes, whose run's priority exceeds a sampling job's run's by at least the gap,
/// asks that job's pool (one able to hold it, of its run's mode) to save a checkpoint and
/// stop at its next step (lease_grant::preempt). The pool answers `preempted`; the job
/// goes back to the queue and resumes from that checkpoint later (checkpoints.hpp), and
/// the pool it freed takes the higher priority's job at once.
///
/// Never thrashing: a job is asked at most once per its sampling stage time (as the mode's
/// policy estimates it; default_model_wait_s without an estimate), and only while its
/// newest checkpoint of the running attempt is at most checkpoint_interval_s old (a
/// backend that does not checkpoint is never asked: it would lose its work). At most as
/// many pools are asked at once as queued jobs of the higher priority wait.

#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// After dispatch: asks the pools to make way that the queue's higher priorities need.
void preempt_for_queue(state& s, double now, std::vector<effect>& fx);

} // namespace vidline::actors::coordinator
