#pragma once
/// Process exit codes of `vidline`, one meaning each, so scripts and service managers can
/// tell them apart. Every verb returns one of these; docs/exit-codes.md is the same table
/// for users (change both together).

namespace vidline::nodes::verbs::exit_code {

inline constexpr int ok = 0;
inline constexpr int job_failed = 1;     ///< wait/run/resume/demo: a job failed; plan: not every job would finish
inline constexpr int usage = 2;          ///< bad command line or config (the CLI's own checks)
inline constexpr int timeout = 3;        ///< wait/run/resume --timeout: the run was still running
inline constexpr int fatal = 4;          ///< could not run (bind failed, journal unusable ...)
inline constexpr int gave_up = 5;        ///< node: a child's restart budget was spent
inline constexpr int unreachable = 6;    ///< client: no answer from the coordinator
inline constexpr int no_such_run = 7;    ///< client: the coordinator knows no such run
inline constexpr int refused = 8;        ///< client: the coordinator refused the request (over a limit, queue full)
inline constexpr int too_large = 9;      ///< client: the answer would not fit a frame (max_frame_bytes)
inline constexpr int cancelled = 10;     ///< wait/run/resume: the run was cancelled (`vidline cancel`)
inline constexpr int not_collected = 11; ///< run/wait/resume --collect: a video was refused (another file at its name) or could not be collected
inline constexpr int crash_point = 86;   ///< a named crash point fired (fault injection)

} // namespace vidline::nodes::verbs::exit_code
