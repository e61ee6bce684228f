#include "backends/sim/outcome.hpp"

#include <sstream>

namespace vidline::backends::sim {

stage_result failed(const char* outcome, std::string error, double elapsed_s, bool cold) {
  stage_result r;
  r.outcome = outcome;
  r.error = std::move(error);
  r.elapsed_s = elapsed_s;
  r.cold = cold;
  return r;
}

stage_result stopped(stage_clock::stop why, const char* stage, const stage_clock& clock,
                     bool cold) {
  double elapsed = clock.elapsed_or(clock.timeout_s());
  if (why == stage_clock::stop::cancelled)
    return failed(msg::outcome::transient, "cancelled", clock.elapsed_or(0), cold);
  std::ostringstream e;
  e << "timeout: " << stage << " exceeded the stage timeout of " << clock.timeout_s()
    << " s (run clock)";
  return failed(msg::outcome::transient, e.str(), elapsed, cold);
}

} // namespace vidline::backends::sim
