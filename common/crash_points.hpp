#pragma once
/// Named crash points at persistence boundaries (after Kudu's fault_crash_* flags). Off
/// unless the environment sets VIDLINE_CRASH, so no production config can carry one by
/// accident; free when off (one relaxed atomic load). When a point fires, the process
/// exits at once with exit_code 86, so a harness tells injected crashes from real ones.
///
///   VIDLINE_CRASH="SEED:PROBABILITY:NAME[,NAME...]"   NAME may be "*" (every point)
///
/// e.g. VIDLINE_CRASH="42:0.2:journal.after_append,latent.before_commit"

#include <string>
#include <vector>

namespace vidline::crash {

/// The exit code of a fired crash point.
inline constexpr int exit_code = 86;

/// Every crash point there is, for documentation and the chaos harness.
const std::vector<std::string>& all_points();

/// Reads VIDLINE_CRASH (once, at start). Throws std::invalid_argument on a malformed value.
void init_from_env();

/// Arms points explicitly (tests).
void arm(unsigned long long seed, double probability, const std::vector<std::string>& names);

/// A crash point: with the armed probability, exits the process right here.
void point(const char* name);

} // namespace vidline::crash
