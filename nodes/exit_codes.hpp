#pragma once
/// Process exit codes of `vidline`, one meaning each, so scripts and service managers can
/// tell them apart.

namespace vidline::nodes::exit_code {

inline constexpr int ok = 0;
inline constexpr int job_failed = 1;     ///< wait/run/demo: at least one job failed
inline constexpr int usage = 2;          ///< bad command line or config
inline constexpr int timeout = 3;        ///< wait: gave up waiting
inline constexpr int fatal = 4;          ///< could not run (bind failed, journal unusable ...)
inline constexpr int gave_up = 5;        ///< node: a child's restart budget was spent
inline constexpr int unreachable = 6;    ///< client: no answer from the coordinator
inline constexpr int crash_point = 86;   ///< a named crash point fired (fault injection)

} // namespace vidline::nodes::exit_code
