#pragma once
/// Restart intensity as a pure value: at most `max_restarts` restarts within `period_s`.

#include <deque>

#include "config/knobs.hpp"

namespace vidline::actors {

class restart_budget {
public:
  explicit restart_budget(config::restart_policy p = {}) : policy_(p) {}

  /// Records a restart at `now` (seconds) if the budget allows it; false = give up.
  bool try_restart(double now) {
    while (!times_.empty() && now - times_.front() > policy_.period_s)
      times_.pop_front();
    if (static_cast<int>(times_.size()) >= policy_.max_restarts)
      return false;
    times_.push_back(now);
    return true;
  }

  int recent() const { return static_cast<int>(times_.size()); }

private:
  config::restart_policy policy_;
  std::deque<double> times_;
};

} // namespace vidline::actors
