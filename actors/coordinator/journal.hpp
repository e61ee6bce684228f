#pragma once
/// The coordinator's durable memory. The coordinator writes every changed run and job
/// (and the attempt counter) in one transaction before it sends anything that depends on
/// them; on start it loads everything back. Implemented in nodes/ (SQLite).

#include <cstdint>
#include <deque>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors {

class journal {
public:
  virtual ~journal() = default;

  /// Durably records these runs (without jobs) and jobs, and the attempt counter, at once.
  /// Throws std::runtime_error when it cannot: the caller must not go on as if it had.
  virtual void write(const std::vector<const sched::run*>& runs,
                     const std::vector<const sched::job*>& jobs, uint64_t next_attempt) = 0;

  /// Everything recorded: runs oldest first, with their jobs; and the attempt counter.
  virtual void load(std::deque<sched::run>& runs, uint64_t& next_attempt) = 0;
};

} // namespace vidline::actors
