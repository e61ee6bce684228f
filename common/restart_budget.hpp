#pragma once
/// Restart intensity as a pure value: at most `max_restarts` restarts within `period_s`.
/// The one restart window of the project: the actor supervisor (actors/supervisor) and the
/// supervisors of backend processes (backends/process, backends/worker) all count with it.

#include <deque>

namespace vidline {

class restart_budget {
public:
  restart_budget(int max_restarts = 5, double period_s = 30)
      : max_restarts_(max_restarts), period_s_(period_s) {}

  /// Records a restart at `now` (seconds, any monotonic clock) if the budget allows it;
  /// false = more than max_restarts within period_s: give up.
  bool try_restart(double now) {
    while (!times_.empty() && now - times_.front() > period_s_)
      times_.pop_front();
    if (static_cast<int>(times_.size()) >= max_restarts_)
      return false;
    times_.push_back(now);
    return true;
  }

  int recent() const { return static_cast<int>(times_.size()); }
  int max_restarts() const { return max_restarts_; }
  double period_s() const { return period_s_; }

private:
  int max_restarts_;
  double period_s_;
  std::deque<double> times_;
};

} // namespace vidline
