#pragma once
/// How the sim stages build their stage_result values (internal to backends/sim).

#include <string>

#include "backends/backend.hpp"
#include "backends/sim/stage_clock.hpp"

namespace vidline::backends::sim {

/// A result that is not ok.
stage_result failed(const char* outcome, std::string error, double elapsed_s, bool cold = false);

/// The result of an attempt stopped by cancel ("transient", "cancelled") or by its stage
/// timeout ("transient", naming the timeout). `stage` is "sampling", "decoding", ...
stage_result stopped(stage_clock::stop why, const char* stage, const stage_clock& clock,
                     bool cold = false);

} // namespace vidline::backends::sim
