#include "backends/sim/stage_clock.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace vidline::backends::sim {

stage_clock::stage_clock(double time_scale, double timeout_s, const std::atomic<bool>* cancel)
    : time_scale_(time_scale), timeout_s_(timeout_s), cancel_(cancel), start_(clock::now()) {
  if (!(time_scale >= 0))
    throw std::invalid_argument("stage_clock: time_scale must be >= 0");
  if (!(timeout_s >= 0))
    throw std::invalid_argument("stage_clock: timeout_s must be >= 0");
}

stage_clock::clock::duration stage_clock::to_real(double run_s) const {
  return std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(run_s * time_scale_));
}

bool stage_clock::cancelled() const {
  return cancel_ != nullptr && cancel_->load(std::memory_order_acquire);
}

double stage_clock::elapsed_s() const {
  if (time_scale_ == 0)
    return 0;
  return std::chrono::duration<double>(clock::now() - start_).count() / time_scale_;
}

stage_clock::stop stage_clock::check() const {
  if (cancelled())
    return stop::cancelled;
  if (timeout_s_ > 0 && time_scale_ > 0 && elapsed_s() >= timeout_s_)
    return stop::timed_out;
  return stop::reached;
}

stage_clock::stop stage_clock::wait_until(double run_s) const {
  bool limited = timeout_s_ > 0 && run_s > timeout_s_;
  auto target = start_ + to_real(limited ? timeout_s_ : run_s);
  for (;;) {
    if (cancelled())
      return stop::cancelled;
    auto now = clock::now();
    if (now >= target) {
      // Work done before the wait (generating a latent) may already have overrun the limit.
      if (limited || (timeout_s_ > 0 && time_scale_ > 0 && elapsed_s() > timeout_s_))
        return stop::timed_out;
      return stop::reached;
    }
    std::this_thread::sleep_for(std::min<clock::duration>(target - now, slice));
  }
}

} // namespace vidline::backends::sim
