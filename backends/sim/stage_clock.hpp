#pragma once
/// Paces one stage attempt of a `sim` backend on the scaled clock: real seconds =
/// run-clock seconds x time_scale. Honours the attempt's cancel flag and its run-clock
/// timeout while waiting.

#include <atomic>
#include <chrono>

namespace vidline::backends::sim {

/// The clock of one stage attempt, started at construction.
class stage_clock {
public:
  /// Why a wait ended.
  enum class stop { reached, cancelled, timed_out };

  /// The longest real sleep between two looks at the cancel flag.
  static constexpr std::chrono::milliseconds slice{5};

  /// `time_scale` real seconds per run-clock second (>= 0); `timeout_s` run-clock seconds
  /// (0 = none); `cancel` may be null.
  stage_clock(double time_scale, double timeout_s, const std::atomic<bool>* cancel);

  /// Run-clock seconds since the start (real elapsed / time_scale; 0 when time_scale is 0).
  double elapsed_s() const;

  /// elapsed_s(), or `virtual_s` when time_scale is 0 (no real time passes: the stage
  /// reports the run-clock seconds it stands for).
  double elapsed_or(double virtual_s) const { return time_scale_ > 0 ? elapsed_s() : virtual_s; }

  /// Whether the attempt may go on now: not cancelled and not past its timeout.
  stop check() const;

  /// Waits until `run_s` run-clock seconds after the start, in slices of at most `slice`.
  /// Returns `timed_out` when the timeout comes first (or had already passed).
  stop wait_until(double run_s) const;

  double timeout_s() const noexcept { return timeout_s_; }

private:
  using clock = std::chrono::steady_clock;

  clock::duration to_real(double run_s) const;
  bool cancelled() const;

  double time_scale_;
  double timeout_s_;
  const std::atomic<bool>* cancel_;
  clock::time_point start_;
};

} // namespace vidline::backends::sim
