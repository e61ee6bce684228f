#pragma once
/// A reviewer's verdict in the run index (docs/shots.md, "Outputs and the run index"): the
/// coordinator's shell appends it to `<data_dir>/outputs/<run>/index.jsonl` on its own host
/// when the video's line is there (its decoder runs on this host). The index stays
/// append-only: the video's line again, with `review` added, so the last line of a name
/// holds as ever.

#include <string>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors {

/// Appends job `j`'s verdict (`unix_s`: when) to its run's index under `data_dir`; false when
/// its video's line is not in this host's index. Throws std::runtime_error on an I/O error.
bool index_verdict(const std::string& data_dir, const sched::job& j, double unix_s);

} // namespace vidline::actors
