#pragma once
/// The reference line's eight measured 6-job batches (docs/reference.md,
/// "Batches of 6 jobs"), in its own mode names, which the reference config reuses. The
/// planner's calibration is judged against them (launch/bench plan, docs/planner.md).

#include <cstdint>
#include <string_view>

namespace vidline::actors::planner {

struct reference_row {
  std::string_view name;   ///< short id for RESULT lines
  std::string_view mode;
  uint32_t width, height, seconds, count;
  double first_s, makespan_s, clips_per_hour;
};

inline constexpr reference_row reference_rows[] = {
  {"small_eight", "single_eight_plus_one", 416, 736, 5, 6, 133.314, 440.791, 49.00},
  {"small_four_four", "four_four_plus_one", 416, 736, 5, 6, 146.396, 296.917, 72.75},
  {"small_four_four_xtx", "four_four_xtx_plus_one", 416, 736, 5, 6, 147.707, 266.324, 81.10},
  {"small_eight_xtx", "eight_xtx_plus_one", 416, 736, 5, 6, 136.910, 332.706, 64.92},
  {"large_eight", "single_eight_plus_one", 736, 1280, 5, 6, 238.642, 1024.217, 21.09},
  {"large_eight_xtx", "eight_xtx_plus_one", 736, 1280, 5, 6, 241.279, 945.328, 22.85},
  {"large_four_four", "four_four_plus_one", 736, 1280, 5, 6, 346.771, 902.538, 23.93},
  {"large_four_four_xtx", "four_four_xtx_plus_one", 736, 1280, 5, 6, 352.477, 677.538, 31.88},
};

/// The measured row of this batch, or nullptr.
inline const reference_row* find_reference_row(std::string_view mode, uint32_t width,
                                               uint32_t height, uint32_t seconds,
                                               uint32_t count) {
  for (auto& r : reference_rows)
    if (r.mode == mode && r.width == width && r.height == height && r.seconds == seconds
        && r.count == count)
      return &r;
  return nullptr;
}

} // namespace vidline::actors::planner
