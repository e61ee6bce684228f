#pragma once
/// Injected backend faults for the chaos campaign: a stage that hangs (until its stage
/// timeout ends it) or that crashes half-way (a transient failure, as a backend process
/// dying would give). Off unless the environment sets
///
///   VIDLINE_SIM_FAULTS="SEED:HANG_PROBABILITY:CRASH_PROBABILITY"
///
/// so no production config can carry it by accident.

namespace vidline::backends::sim {

enum class injected { none, hang, crash };

/// The fault for the next stage (reads VIDLINE_SIM_FAULTS once; thread-safe).
injected next_fault();

} // namespace vidline::backends::sim
